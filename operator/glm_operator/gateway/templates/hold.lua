-- Written by glm-operator gateway sync. Holds a request for a model without a usable server (scaled
-- to zero, or starting) until one is usable: at most max_held requests per backend in this process,
-- each at most max_wait_ms.
--
-- hold_until_ready (an action, for plain requests) sets txn.hold: "ready", "expired" or "full" (not
-- held: over max_held); the configuration answers the 503s. core.msleep yields, so the wait does not
-- count against tune.lua.session-timeout.
--
-- hold_stream (a service, for "stream": true requests) answers 200 text/event-stream at once and
-- sends an SSE comment every keepalive interval while it waits, so no client or proxy on the way
-- closes an idle stream. HAProxy gives a stream one producer of its answer, either a server or a
-- service, and only a service can send bytes before a server answered; so once a server is usable
-- the service sends the request itself, through the gateway's own "held_streams" frontend on a
-- unix socket (same backend, balancing, checks and timeouts), and relays the answer as it comes,
-- chunk by chunk, never buffering it. The status line is sent by then: an error of the model or an
-- expired wait becomes one SSE "data:" event carrying the OpenAI error.

local STREAM_SOCKET = "{{ stream_socket }}" -- the held_streams frontend
local MAX_WAIT_MS = {{ s.hold_max_wait_seconds * 1000 }}
local MAX_HELD = {{ s.hold_max_requests }}
local KEEPALIVE_MS = {{ s.hold_keepalive_seconds * 1000 }}
local READ_TIMEOUT_S = {{ s.read_timeout_seconds }}
local FALLBACK_RETRY_AFTER = "{{ s.wake_retry_after_seconds }}"

local held = {} -- backend -> { [token] = deadline (ms) }
local next_token = 0

local function usable(backend)
  for _, server in pairs(backend.servers) do
    local status = server:get_stats()["status"]
    if status == "UP" or status == "no check" then
      return true
    end
  end
  return false
end

local function now_ms()
  local t = core.now()
  return t.sec * 1000 + math.floor(t.usec / 1000)
end

-- A place in the backend's queue, or nil when max_held are waiting. A place whose holder vanished
-- (a client gone while its service slept: the service is dropped, its release never runs) frees
-- itself at its deadline.
local function take(name, max_held, max_wait_ms)
  local places = held[name] or {}
  held[name] = places
  local now, count = now_ms(), 0
  for token, deadline in pairs(places) do
    if deadline <= now then
      places[token] = nil
    else
      count = count + 1
    end
  end
  if count >= max_held then
    return nil
  end
  next_token = next_token + 1
  places[next_token] = now + max_wait_ms + 1000
  return next_token
end

local function release(name, token)
  if held[name] ~= nil then
    held[name][token] = nil
  end
end

-- Sleeps until the backend has a usable server or max_wait_ms passed; tick() runs every
-- tick_ms (keep-alive comments). Returns whether a server is usable.
local function wait_usable(backend, max_wait_ms, tick_ms, tick)
  local waited, since_tick = 0, 0
  while waited < max_wait_ms and not usable(backend) do
    core.msleep(100)
    waited = waited + 100
    since_tick = since_tick + 100
    if tick ~= nil and since_tick >= tick_ms then
      since_tick = 0
      tick()
    end
  end
  return usable(backend)
end

core.register_action("hold_until_ready", { "http-req" }, function(txn, name, max_wait_ms, max_held)
  local backend = core.backends[name]
  if backend == nil or usable(backend) then
    return
  end
  local limit = tonumber(max_wait_ms)
  local token = take(name, tonumber(max_held), limit)
  if token == nil then
    txn:set_var("txn.hold", "full")
    return
  end
  local ready = wait_usable(backend, limit)
  release(name, token)
  txn:set_var("txn.hold", ready and "ready" or "expired")
end, 3)

local function error_event(message, kind, code)
  local body = string.format(
    '{"error":{"message":"%s","type":"%s","param":null,"code":"%s"}}', message, kind, code)
  return "data: " .. body .. "\n\n"
end

local function not_ready_message(applet)
  local seconds = applet:get_var("txn.retry_after") or FALLBACK_RETRY_AFTER
  return "No replica of this model is ready (it may be scaled to zero and starting): retry after "
    .. tostring(seconds) .. " seconds."
end

-- The request as the held_streams frontend receives it: the body already read in full (the
-- gateway buffers it to route on "model"), the backend named in a header that frontend trusts.
local function upstream_request(applet, name, body)
  local path = applet.path
  if applet.qs ~= nil and applet.qs ~= "" then
    path = path .. "?" .. applet.qs
  end
  local lines = { applet.method .. " " .. path .. " HTTP/1.1" }
  for header, values in pairs(applet.headers) do
    local lower = string.lower(header)
    if lower ~= "content-length" and lower ~= "connection" and lower ~= "transfer-encoding"
      and lower ~= "x-glm-backend" and lower ~= "keep-alive" and lower ~= "te"
      and lower ~= "expect" and lower ~= "upgrade" then
      for _, value in pairs(values) do
        lines[#lines + 1] = header .. ": " .. value
      end
    end
  end
  lines[#lines + 1] = "x-glm-backend: " .. name
  lines[#lines + 1] = "content-length: " .. #body
  lines[#lines + 1] = "connection: close"
  return table.concat(lines, "\r\n") .. "\r\n\r\n" .. body
end

-- Relays the upstream answer's body to the client as it comes; an error answer (400 context too
-- long, 503...) becomes one SSE event with its JSON body. Returns nil, or what went wrong.
local function relay(applet, socket)
  local status_line = socket:receive("*l")
  if status_line == nil then
    return "no answer"
  end
  local status = tonumber(string.match(status_line, "^HTTP/%d%.%d (%d%d%d)"))
  local chunked, length = false, nil
  while true do
    local line = socket:receive("*l")
    if line == nil then
      return "answer cut in its headers"
    end
    if line == "" then
      break
    end
    local header, value = string.match(line, "^([^:]+):%s*(.-)%s*$")
    if header ~= nil then
      header = string.lower(header)
      if header == "transfer-encoding" and string.find(string.lower(value), "chunked", 1, true) then
        chunked = true
      elseif header == "content-length" then
        length = tonumber(value)
      end
    end
  end
  local failed_body = {}
  local function emit(data)
    if status == 200 then
      applet:send(data)
    else
      failed_body[#failed_body + 1] = data
    end
  end
  local failed = nil
  if chunked then
    -- vLLM's streams: each chunk read whole (its size is known), sent on at once.
    while true do
      local size_line = socket:receive("*l")
      local size = size_line and tonumber(string.match(size_line, "^%x+"), 16)
      if size == nil then
        failed = "answer cut in a chunk"
        break
      end
      if size == 0 then
        break
      end
      local data = socket:receive(size)
      if data == nil or socket:receive("*l") == nil then
        failed = "answer cut in a chunk"
        break
      end
      emit(data)
    end
  elseif length ~= nil then
    local data = length > 0 and socket:receive(length) or ""
    if data == nil then
      failed = "answer cut"
    else
      emit(data)
    end
  else
    -- Ended by the close (an HTTP/1.0 answer): line by line, as SSE is written, since a read of
    -- so many bytes would wait for all of them.
    while true do
      local line, _, partial = socket:receive("*l")
      if line == nil then
        if partial ~= nil and partial ~= "" then
          emit(partial)
        end
        break
      end
      emit(line .. "\n")
    end
  end
  if status ~= 200 then
    local body = string.gsub(table.concat(failed_body), "[\r\n]+", " ")
    applet:send("data: " .. body .. "\n\n")
  end
  return failed
end

core.register_service("hold_stream", "http", function(applet)
  local name = applet.f:be_name()
  local backend = core.backends[name]
  -- The body is in HAProxy's buffer already (option http-buffer-request).
  local body = applet:receive() or ""
  local token = take(name, MAX_HELD, MAX_WAIT_MS)
  if token == nil then
    local message = "Too many requests are waiting for this model to start: retry after "
      .. tostring(applet:get_var("txn.retry_after") or FALLBACK_RETRY_AFTER) .. " seconds."
    local answer = string.format(
      '{"error":{"message":"%s","type":"server_error","param":null,"code":"model_not_ready"}}', message)
    applet:set_status(503)
    applet:add_header("content-type", "application/json")
    applet:add_header("retry-after", tostring(applet:get_var("txn.retry_after") or FALLBACK_RETRY_AFTER))
    applet:add_header("content-length", tostring(#answer))
    applet:start_response()
    applet:send(answer)
    return
  end
  applet:set_status(200)
  applet:add_header("content-type", "text/event-stream")
  applet:add_header("cache-control", "no-cache")
  applet:start_response()
  applet:send(": waiting for a replica\n\n")
  local ready = wait_usable(backend, MAX_WAIT_MS, KEEPALIVE_MS, function()
    applet:send(": waiting for a replica\n\n")
  end)
  release(name, token)
  if not ready then
    applet:send(error_event(not_ready_message(applet), "server_error", "model_not_ready"))
    return
  end
  local socket = core.tcp()
  socket:settimeout(READ_TIMEOUT_S)
  if socket:connect("unix@" .. STREAM_SOCKET) == nil then
    applet:send(error_event(not_ready_message(applet), "server_error", "model_not_ready"))
    return
  end
  socket:send(upstream_request(applet, name, body))
  local failed = relay(applet, socket)
  socket:close()
  if failed ~= nil then
    applet:send(error_event("The model's answer was cut (" .. failed .. ").", "server_error", "upstream_error"))
  end
end)
