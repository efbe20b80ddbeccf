-- The sandbox a script runs in (see lua.rs, whose module documentation states what it does and
-- why), run once per script before it: receives the Rust side's functions (`api`) and the `KEYS`
-- and `ARGV` tables, returns the globals table the script runs with.
local api, keys, argv = ...
-- What the sandbox relies on, captured before the script can replace any global.
local G = _G
local byte, concat, error, next, pairs, rawget, rawset, select, setmetatable, tonumber, tostring,
      type = string.byte, table.concat, error, next, pairs, rawget, rawset, select, setmetatable,
      tonumber, tostring, type
local killed, command = api.killed, api.command
local READONLY = 'Attempt to modify a readonly table'
local function fail(text) error({err = 'ERR ' .. text}, 0) end
local function arity(n, text, ...) if select('#', ...) ~= n then fail(text) end end
local function one_string(...) return select('#', ...) == 1 and type(...) == 'string' end

-- Catching an error must not catch a kill. And Lua 5.1's pcall and xpcall push their status past
-- the stack space they checked when the call returns many values: the results travel packed.
local function check_kill(...)
  if killed() then error({err = api.killed_text}, 0) end
  return ...
end
local raw_pcall, raw_xpcall, raw_resume, raw_loadstring, unpack = pcall, xpcall,
  coroutine.resume, loadstring, unpack
local function pack(...) return {n = select('#', ...), ...} end
local function call_packed(f, ...) return pack(f(...)) end
G.pcall = function(...)
  if select('#', ...) == 0 then error("bad argument #1 to 'pcall' (value expected)", 2) end
  local ok, results = raw_pcall(call_packed, ...)
  check_kill()
  if ok then return true, unpack(results, 1, results.n) end
  -- As Redis 7's pcall: the text of an error table, for scripts written for older versions.
  if type(results) == 'table' and type(rawget(results, 'err')) == 'string' then
    return false, rawget(results, 'err')
  end
  return false, results
end
G.xpcall = function(f, handler)
  local ok, results = raw_xpcall(function() return pack(f()) end, handler)
  check_kill()
  if ok then return true, unpack(results, 1, results.n) end
  return false, results
end
coroutine.resume = function(...) return check_kill(raw_resume(...)) end
-- The script runs with one result: the reply is its first.
api.run = function(script, handler)
  return raw_xpcall(function() return (script()) end, handler)
end
G.loadstring = function(s, ...)
  if type(s) == 'string' and byte(s, 1) == 27 then
    return nil, "attempt to load a binary chunk (mode is 't')"
  end
  return raw_loadstring(s, ...)
end
G.load, G.dofile, G.loadfile, G.print = nil, nil, nil, nil

local rep = string.rep
string.rep = function(s, n)
  if s == '' and tonumber(n) ~= nil then return '' end
  return rep(s, n)
end
local function bounded(name, f, plain_at)
  return function(s, pattern, ...)
    if type(pattern) == 'string' and #pattern > api.pattern_bytes_max
       and not (plain_at and select(plain_at, ...)) then
      error("bad argument #2 to '" .. name .. "' (pattern longer than " ..
            api.pattern_bytes_max .. " bytes)", 2)
    end
    return f(s, pattern, ...)
  end
end
string.find = bounded('find', string.find, 2)
string.match = bounded('match', string.match)
string.gmatch = bounded('gmatch', string.gmatch)
string.gsub = bounded('gsub', string.gsub)

local redis = {
  -- A C function, as in Redis: a script's `return redis.call(...)` keeps its frame, so an error
  -- names the script's line. It packs the arguments, and raises the reply when it is an error.
  call = api.c_function(function(args)
    local reply, failed = command(args)
    return not failed, reply
  end),
  pcall = function(...) return (command(pack(...))) end,
  sha1hex = function(...)
    arity(1, 'wrong number of arguments', ...)
    return api.sha1hex(...)
  end,
  error_reply = function(...)
    if not one_string(...) then return {err = 'ERR wrong number or type of arguments'} end
    return {err = api.error_text(...)}
  end,
  status_reply = function(...)
    if not one_string(...) then return {err = 'ERR wrong number or type of arguments'} end
    return {ok = ...}
  end,
  log = function(...)
    if select('#', ...) < 2 then fail('redis.log() requires two arguments or more.') end
    local level = tonumber((...))
    if level == nil then fail('First argument must be a number (log level).') end
    if level <= -1 or level >= 4 then fail('Invalid debug level.') end
    local args, parts = pack(...), {}
    for i = 2, args.n do
      if type(args[i]) == 'string' or type(args[i]) == 'number' then parts[#parts + 1] = args[i] end
    end
    api.log(level, concat(parts, ' '))
  end,
  setresp = function(...)
    arity(1, 'redis.setresp() requires one argument.', ...)
    local resp = tonumber((...)) or 0
    if resp ~= 2 and resp ~= 3 then fail('RESP version must be 2 or 3.') end
    api.resp = resp
  end,
  -- keel replicates a script's effects, always: the flags are checked, then ignored.
  set_repl = function(...)
    arity(1, 'redis.set_repl() requires two arguments.', ...)
    local flags = tonumber((...)) or 0
    if flags ~= 0 and flags ~= 1 and flags ~= 2 and flags ~= 3 then
      fail('Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.')
    end
  end,
  replicate_commands = function() return true end,
  breakpoint = function() return false end,
  debug = function() end,
  LOG_DEBUG = 0, LOG_VERBOSE = 1, LOG_NOTICE = 2, LOG_WARNING = 3,
  REPL_NONE = 0, REPL_AOF = 1, REPL_SLAVE = 2, REPL_REPLICA = 2, REPL_ALL = 3,
  REDIS_VERSION = api.version, REDIS_VERSION_NUM = api.version_num,
}

local libraries = api.libraries

-- Read-only tables: an empty proxy reads through to the real table and refuses writes.
local real_of = {}
local function refuse() error(READONLY, 2) end
local LOCKED = setmetatable({}, {__newindex = refuse, __metatable = false})
real_of[LOCKED] = LOCKED
local function readonly(t)
  local proxy = setmetatable({}, {__index = t, __newindex = refuse, __metatable = LOCKED})
  real_of[proxy] = t
  return proxy
end
local function real(t) return type(t) == 'table' and real_of[t] or t end
local function proxy_next(t, k) return next(real(t), k) end
G.next = proxy_next
G.pairs = function(t)
  if real(t) ~= t then return proxy_next, t, nil end
  return pairs(t)
end
G.rawget = function(t, k) return rawget(real(t), k) end
G.rawset = function(t, k, v)
  if real(t) ~= t then error(READONLY, 2) end
  return rawset(t, k, v)
end
G.setmetatable = function(t, mt)
  if real(t) ~= t then error(READONLY, 2) end
  return setmetatable(t, mt)
end

G.KEYS, G.ARGV, G.redis = keys, argv, readonly(redis)
G.string, G.table, G.math, G.coroutine =
  readonly(string), readonly(table), readonly(math), readonly(coroutine)
-- Redis's libraries (libs/), read-only as Redis 7.0 makes them.
G.cjson, G.cmsgpack, G.struct, G.bit = readonly(libraries.cjson), readonly(libraries.cmsgpack),
  readonly(libraries.struct), readonly(libraries.bit)
local globals = setmetatable({}, {
  __index = G,
  __newindex = function(_, name)
    if rawget(G, name) == nil then
      error(READONLY .. ": Script attempted to create global variable '" ..
            tostring(name) .. "'", 2)
    end
    error(READONLY, 2)
  end,
  __metatable = LOCKED,
})
real_of[globals] = G
G._G = globals
setmetatable(G, {__index = function(_, name)
  error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
end})
return globals
