-- Written by glm-operator gateway sync. Counts the tokens of each answer into the key's per-key
-- table entry (gpc1, whose gpc1_rate over 60 s is the key's tokens per minute; the frontend refuses
-- a key at or over its limit, and the peers section shares the table between replicas).
--
-- The filter reads the answer as it passes, never holding it back: a JSON answer and an SSE stream
-- alike, the last "usage" object in it wins (a stream with stream_options.include_usage carries it
-- in its last data chunk, vLLM's continuous usage stats in every chunk, cumulative). A stream without
-- one (the client did not ask for usage) is counted as one token per "data:" event (vLLM sends an
-- event per decoding step) plus its request body's bytes / {{ bytes_per_token }} for the prompt: an estimate,
-- but the gateway neither rewrites requests nor adds a chunk the client did not ask for.
--
-- The count lands when the answer ends (or the client leaves): a request in flight is not counted
-- yet, so one key can overshoot its limit by the requests it has in flight.

local BYTES_PER_TOKEN = {{ bytes_per_token }}
local CARRY = 4096 -- longest usage object kept while it is cut between two chunks

local Usage = {}
Usage.id = "glm-usage"
Usage.flags = filter.FLT_CFG_FL_HTX
Usage.__index = Usage

function Usage:new()
  return setmetatable({ carry = "", tail = "\n", usage = nil, events = 0, last = "", sse = false, counted = false }, Usage)
end

local function tokens_of(object)
  local total = object:match('"total_tokens"%s*:%s*(%d+)')
  if total then
    return tonumber(total)
  end
  local prompt = object:match('"prompt_tokens"%s*:%s*(%d+)')
  local completion = object:match('"completion_tokens"%s*:%s*(%d+)')
  if prompt or completion then
    return (tonumber(prompt) or 0) + (tonumber(completion) or 0)
  end
  return nil
end

-- The usage objects of one more piece of the answer. In a JSON string a quote is escaped, so the
-- text "usage" of a model's output never matches '"usage"' followed by a colon.
function Usage:scan(piece)
  local text = self.carry .. piece
  self.carry = text:sub(-6) -- a '"usage"' cut after its 6th byte is found again next time
  local from = 1
  while true do
    local at = text:find('"usage"', from, true)
    if not at then
      break
    end
    local rest = text:sub(at)
    local object = rest:match('^"usage"%s*:%s*(%b{})')
    if object then
      self.usage = tokens_of(object) or self.usage
    elseif (rest:match('^"usage"%s*:?%s*$') or rest:match('^"usage"%s*:%s*{')) and #rest < CARRY then
      self.carry = rest -- cut by the piece's end: completed by the next one
      break
    end
    from = at + 1
  end
  if self.sse then
    local lines = self.tail .. piece
    local _, events = lines:gsub("\ndata:", "")
    self.events = self.events + events
    self.tail = lines:sub(-5) -- shorter than "\ndata:": an event is never counted twice
    self.last = (self.last .. piece):sub(-16) -- the stream's end: "data: [DONE]" is no token
  end
end

function Usage:tokens(txn)
  if self.usage then
    return self.usage
  end
  if not self.sse then
    return 0 -- an error, or an answer without usage: nothing generated to count
  end
  local events = self.events - (self.last:find("data: [DONE]", 1, true) and 1 or 0)
  local bytes = tonumber(txn:get_var("txn.request_bytes")) or 0
  return events + math.ceil(bytes / BYTES_PER_TOKEN)
end

function Usage:start_analyze(txn, chn)
  if chn:is_resp() and txn:get_var("txn.client") ~= nil and txn:get_var("txn.backend") ~= nil then
    filter.register_data_filter(self, chn)
  end
  return filter.CONTINUE
end

function Usage:http_headers(txn, http_msg)
  if http_msg:is_resp() then
    local types = http_msg:get_headers()["content-type"]
    self.sse = types ~= nil and types[0] ~= nil and types[0]:find("text/event-stream", 1, true) ~= nil
  end
  return filter.CONTINUE
end

function Usage:http_payload(txn, http_msg)
  local piece = http_msg:body()
  if piece and #piece > 0 then
    self:scan(piece)
  end
  return http_msg:forward(http_msg:input())
end

function Usage:end_analyze(txn, chn)
  if chn:is_resp() and not self.counted then
    self.counted = true
    -- One increment per token: HAProxy 2.6 (the oldest image
    -- the gateway supports) has no action adding more than 1 to a counter (sc-add-gpc came later).
    local fetches = txn.f
    for _ = 1, self:tokens(txn) do
      fetches:sc_inc_gpc1(0)
    end
  end
  return filter.CONTINUE
end

core.register_filter("usage", Usage, function(usage, args)
  return usage
end)
