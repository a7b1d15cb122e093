-- Argo CD health check for inference.glm.dev/GLMDeployment.
-- Reads what the operator writes: status.observedGeneration, status.conditions (kstatus style:
-- Planned, Available, Progressing, Degraded) and status.phase. `obj` is the live object.
local hs = {}

local function condition(status, type_)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == type_ then
      return c
    end
  end
  return nil
end

local function describe(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  if c ~= nil and c.reason ~= nil and c.reason ~= "" then
    return c.reason
  end
  return fallback
end

local status = obj.status
if status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to plan this GLMDeployment"
  return hs
end

local generation = obj.metadata and obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end

local degraded = condition(status, "Degraded")
local planned = condition(status, "Planned")
local available = condition(status, "Available")
local progressing = condition(status, "Progressing")

if (degraded ~= nil and degraded.status == "True") or status.phase == "Failed" or status.phase == "Degraded" then
  hs.status = "Degraded"
  hs.message = describe(degraded, "GLMDeployment is " .. tostring(status.phase))
  return hs
end
if planned ~= nil and planned.status == "False" then
  hs.status = "Degraded"
  hs.message = describe(planned, "No GPU configuration fits this GLMDeployment")
  return hs
end
if progressing ~= nil and progressing.status == "True" then
  hs.status = "Progressing"
  hs.message = describe(progressing, "Rolling out")
  return hs
end
if (available ~= nil and available.status == "True") or (available == nil and status.phase == "Ready") then
  hs.status = "Healthy"
  hs.message = describe(available, "All replicas are ready")
  return hs
end

hs.status = "Progressing"
hs.message = describe(available, "Phase " .. tostring(status.phase or "Pending"))
return hs
