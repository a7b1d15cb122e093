-- Written by glm-operator gateway sync. Holds a request for a model without a usable server (scaled
-- to zero, or starting) until one is usable: at most max_held requests per backend in this process,
-- each at most max_wait_ms. Sets txn.hold: "ready", "expired" or "full" (not held: over max_held).
-- core.msleep yields, so the wait does not count against tune.lua.session-timeout.
local held = {}

local function usable(backend)
  for _, server in pairs(backend.servers) do
    local status = server:get_stats()["status"]
    if status == "UP" or status == "no check" then
      return true
    end
  end
  return false
end

core.register_action("hold_until_ready", { "http-req" }, function(txn, name, max_wait_ms, max_held)
  local backend = core.backends[name]
  if backend == nil or usable(backend) then
    return
  end
  local count = held[name] or 0
  if count >= tonumber(max_held) then
    txn:set_var("txn.hold", "full")
    return
  end
  held[name] = count + 1
  local waited, limit = 0, tonumber(max_wait_ms)
  while waited < limit and not usable(backend) do
    core.msleep(100)
    waited = waited + 100
  end
  held[name] = held[name] - 1
  txn:set_var("txn.hold", usable(backend) and "ready" or "expired")
end, 3)
