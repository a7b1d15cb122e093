-- Written by glm-operator gateway sync. Cache-aware routing (loadBalancing: PrefixAffinity): a
-- request goes to the replica that already served the longest run of its prompt's leading blocks,
-- so vLLM's prefix cache holds them and only the rest is prefilled.
--
-- The prompt: a chat request's messages in order, each as "<|role|>\n" then its content (text parts
-- of a list content joined), which is how a chat template lays them out; a completion's "prompt"
-- text, or its token ids. Text is cut into blocks of BLOCK_BYTES bytes (vLLM's block of
-- BLOCK_TOKENS tokens at BYTES_PER_TOKEN bytes a token: no tokenizer here), token ids into blocks
-- of BLOCK_TOKENS ids; only whole blocks count, as vLLM caches only whole blocks. Each block's hash
-- covers the block and the hash before it (xxh64), so one hash names a whole prefix.
--
-- Each server remembers the hashes of the blocks it was sent (two generations of CACHE_BLOCKS / 2
-- hashes: a hash found is moved to the newer one, and when it is full the older one is dropped, an
-- approximate LRU like vLLM's eviction). Its memory is dropped when its slot gets another address.
--
-- The choice, among the usable servers (UP, or no check; weight > 0):
--   1. eligible: its load with this request stays within the cap: load + 1 <= max(weight,
--      ceil(LOAD_FACTOR/100 * (total + 1) * weight / total weight)), load being its requests in
--      flight and queued. A server's weight is its planned concurrency (the sequences its replica
--      batches at once), so a replica with a free place in its batch always qualifies (one more
--      sequence there costs little; prefilling the prompt again elsewhere costs much); past that,
--      LOAD_FACTOR percent of its weighted share of all the load, as HAProxy's hash-balance-factor
--      bounds a hash's server. So one hot prefix cannot pile onto one replica;
--   2. the eligible server with the longest run of the prompt's blocks (a run shorter than
--      MIN_RUN_BLOCKS counts as none: a chat template's header or a short instruction that every
--      request shares saves little prefill, and following it would pile unrelated prompts onto the
--      first server that saw it), ties (no match anywhere
--      included) to the fewest requests in flight per unit of weight, then in turn (a rotation
--      over the servers' names, moved on by each request: new prompts spread when all are idle);
--   3. none eligible: the fewest in flight per unit of weight.
-- The request's blocks are then remembered for the chosen server. txn.cache_server names it (the
-- backend's use-server rules); txn.cache_blocks is the matched run, in blocks. A request without
-- a prompt is left to the backend's balance (leastconn). Each gateway replica keeps its own view.

local BLOCK_TOKENS = {{ block_tokens }}
local BLOCK_BYTES = {{ block_tokens * bytes_per_token }}
local MAX_BLOCKS = {{ max_blocks }} -- blocks of one prompt considered (its beginning)
local CACHE_BLOCKS = {{ cache_blocks }} -- block hashes remembered per server
local LOAD_FACTOR = {{ load_factor }}
local MIN_RUN_BLOCKS = {{ min_run_blocks }}

-- A small JSON reader, enough to reach "messages" and "prompt". Strings are kept as written
-- (escapes not decoded: the same text gives the same bytes, which is all a hash needs). A body cut
-- short (larger than the proxy's buffer) gives what was read: the prompt's beginning.
local parse_value

local function skip_space(s, i)
  return s:find("[^ \t\r\n]", i) or (#s + 1)
end

local function parse_string(s, i)
  local j = i + 1
  while true do
    local k = s:find('["\\]', j)
    if k == nil then
      return s:sub(i + 1), #s + 1
    end
    if s:byte(k) == 34 then -- '"'
      return s:sub(i + 1, k - 1), k + 1
    end
    j = k + 2
  end
end

local function parse_array(s, i)
  local out = {}
  i = skip_space(s, i + 1)
  if s:byte(i) == 93 then -- ']'
    return out, i + 1
  end
  while i <= #s do
    local value
    value, i = parse_value(s, i)
    out[#out + 1] = value
    i = skip_space(s, i)
    local c = s:byte(i)
    if c == 93 then
      return out, i + 1
    elseif c ~= 44 then -- ','
      return out, #s + 1
    end
    i = i + 1
  end
  return out, i
end

local function parse_object(s, i)
  local out = {}
  i = skip_space(s, i + 1)
  if s:byte(i) == 125 then -- '}'
    return out, i + 1
  end
  while i <= #s do
    if s:byte(i) ~= 34 then
      return out, #s + 1
    end
    local key
    key, i = parse_string(s, i)
    i = skip_space(s, i)
    if s:byte(i) ~= 58 then -- ':'
      return out, #s + 1
    end
    local value
    value, i = parse_value(s, i + 1)
    out[key] = value
    i = skip_space(s, i)
    local c = s:byte(i)
    if c == 125 then
      return out, i + 1
    elseif c ~= 44 then
      return out, #s + 1
    end
    i = skip_space(s, i + 1)
  end
  return out, i
end

parse_value = function(s, i)
  i = skip_space(s, i)
  local c = s:byte(i)
  if c == 34 then
    return parse_string(s, i)
  elseif c == 123 then -- '{'
    return parse_object(s, i)
  elseif c == 91 then -- '['
    return parse_array(s, i)
  end
  local j = s:find("[,%]}%s]", i) or (#s + 1)
  local word = s:sub(i, j - 1)
  return tonumber(word) or word, j
end

local function content_text(content)
  if type(content) == "string" then
    return content
  elseif type(content) ~= "table" then
    return ""
  end
  local parts = {}
  for _, part in ipairs(content) do
    if type(part) == "table" then
      local text = part.text or part.image_url or part.type
      parts[#parts + 1] = type(text) == "string" and text or ""
    end
  end
  return table.concat(parts, "\n")
end

-- The prompt of a request body: ("text", bytes) or ("tokens", ids); nil when it has none.
local function prompt_of(body)
  local ok, request = pcall(parse_value, body, 1)
  if not ok or type(request) ~= "table" then
    return nil
  end
  if type(request.messages) == "table" then
    local pieces = {}
    for _, message in ipairs(request.messages) do
      if type(message) == "table" then
        local role = type(message.role) == "string" and message.role or "user"
        pieces[#pieces + 1] = "<|" .. role .. "|>\n" .. content_text(message.content)
      end
    end
    return "text", table.concat(pieces)
  end
  local prompt = request.prompt
  if type(prompt) == "table" and type(prompt[1]) ~= "number" then
    prompt = prompt[1] -- a batch: its first prompt
  end
  if type(prompt) == "string" then
    return "text", prompt
  elseif type(prompt) == "table" and math.type(prompt[1]) == "integer" then
    return "tokens", prompt
  end
  return nil
end

-- Hashes of the prompt's whole blocks, each over its block and the one before it.
local function block_hashes(kind, prompt, hash)
  local hashes, previous = {}, ""
  local count
  if kind == "text" then
    count = math.min(#prompt // BLOCK_BYTES, MAX_BLOCKS)
  else
    count = math.min(#prompt // BLOCK_TOKENS, MAX_BLOCKS)
  end
  for index = 1, count do
    local block
    if kind == "text" then
      block = prompt:sub((index - 1) * BLOCK_BYTES + 1, index * BLOCK_BYTES)
    else
      block = table.concat(prompt, ",", (index - 1) * BLOCK_TOKENS + 1, index * BLOCK_TOKENS)
    end
    previous = tostring(hash(previous .. "|" .. block))
    hashes[index] = previous
  end
  return hashes
end

local memories = {} -- backend -> server name -> { address, newer = {}, older = {}, size }
local rotations = {} -- backend -> requests routed (the tie-break's turn)

local function memory_of(backend, name, address)
  local servers = memories[backend]
  if servers == nil then
    servers = {}
    memories[backend] = servers
  end
  local memory = servers[name]
  if memory == nil or memory.address ~= address then
    memory = { address = address, newer = {}, older = {}, size = 0 }
    servers[name] = memory
  end
  return memory
end

local function remember(memory, hashes)
  for _, h in ipairs(hashes) do
    if not memory.newer[h] then
      memory.newer[h] = true
      memory.size = memory.size + 1
      if memory.size >= CACHE_BLOCKS // 2 then
        memory.older, memory.newer, memory.size = memory.newer, {}, 0
      end
    end
  end
end

local function matched(memory, hashes)
  local run = 0
  for _, h in ipairs(hashes) do
    if not (memory.newer[h] or memory.older[h]) then
      break
    end
    run = run + 1
  end
  return run
end

local function usable(stats)
  local status = tostring(stats.status)
  return (status == "no check" or status:sub(1, 2) == "UP") and (tonumber(stats.weight) or 0) > 0
end

-- The server for a prompt's block hashes among ``servers`` ({name, memory, load, weight} each).
local function choose(servers, hashes)
  local total_load, total_weight = 0, 0
  for _, s in ipairs(servers) do
    total_load = total_load + s.load
    total_weight = total_weight + s.weight
  end
  local best, best_run, best_share
  local least, least_share
  for _, s in ipairs(servers) do
    local share = (s.load + 1) / s.weight
    if least == nil or share < least_share or (share == least_share and s.turn < least.turn) then
      least, least_share = s, share
    end
    local cap = math.max(s.weight, math.ceil(LOAD_FACTOR / 100 * (total_load + 1) * s.weight / total_weight))
    if s.load + 1 <= cap then
      local run = matched(s.memory, hashes)
      if run < MIN_RUN_BLOCKS then
        run = 0
      end
      if best == nil or run > best_run or (run == best_run and (share < best_share
          or (share == best_share and s.turn < best.turn))) then
        best, best_run, best_share = s, run, share
      end
    end
  end
  if best == nil then
    return least, 0
  end
  return best, best_run
end

local function cache_route(txn, backend_name)
  local kind, prompt = prompt_of(txn.sf:req_body() or "")
  if kind == nil then
    return
  end
  local backend = core.backends[backend_name]
  if backend == nil then
    return
  end
  local servers = {}
  for name, server in pairs(backend.servers) do
    local stats = server:get_stats()
    if usable(stats) then
      servers[#servers + 1] = {
        name = name,
        memory = memory_of(backend_name, name, tostring(stats.addr)),
        load = (tonumber(stats.scur) or 0) + (tonumber(stats.qcur) or 0),
        weight = tonumber(stats.weight),
      }
    end
  end
  if #servers == 0 then
    return
  end
  table.sort(servers, function(a, b) return a.name < b.name end)
  local rotation = rotations[backend_name] or 0
  rotations[backend_name] = rotation + 1
  for index, s in ipairs(servers) do
    s.turn = (index - 1 - rotation) % #servers
  end
  local hashes = block_hashes(kind, prompt, function(text) return txn.c:xxh64(text) end)
  local chosen, run = choose(servers, hashes)
  remember(chosen.memory, hashes)
  txn:set_var("txn.cache_server", chosen.name)
  txn:set_var("txn.cache_blocks", run)
end

core.register_action("cache_route", { "http-req" }, cache_route, 1)
