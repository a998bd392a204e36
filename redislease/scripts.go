package redislease

import "github.com/redis/go-redis/v9"

// The Lua scripts are the only writers of lease keys. Each reads the key,
// checks ownership and writes in one atomic step. Replies are arrays whose
// first element says what happened:
//
//	{"ok", new}         the write happened; new is the record written
//	{"conflict", cur}   acquire: the key is not what the caller saw (cur absent if missing)
//	{"lost", cur}       renew, release: someone else holds it, or a newer version
//	{"missing"}         renew, release: the key does not exist
//	{"garbage", cur}    the key holds something that is not a record
//
// Records are built by concatenation in a fixed field order. Holder and
// token are restricted (ValidNode, hex) so they need no escaping, and
// versions are formatted with %d so Lua never writes 1e+15.

// recordLua builds the record for holder, version, token, state, span.
const recordLua = `
local function record(holder, version, token, state, span)
  return '{"holder":"' .. holder .. '","version":' .. string.format('%d', version) ..
    ',"token":"' .. token .. '","state":"' .. state .. '","lease_span_ms":' .. span .. '}'
end
local function decode(raw)
  local ok, rec = pcall(cjson.decode, raw)
  if not ok or type(rec) ~= 'table' or type(rec.version) ~= 'number' or
     rec.version < 1 or rec.version ~= math.floor(rec.version) or
     type(rec.holder) ~= 'string' or type(rec.token) ~= 'string' or
     (rec.state ~= 'held' and rec.state ~= 'released') then return nil end
  return rec
end
`

// acquireScript: KEYS[1] lease key. ARGV: expected value, "1" if the caller
// saw the key missing, holder, token, floor version, ttl ms, events
// channel, lease span ms. Compare-and-set on exactly the bytes observed; the
// new version is one above both the old one and the caller's floor (the
// highest version it has seen, which survives a Redis data loss).
var acquireScript = redis.NewScript(recordLua + `
local cur = redis.call('GET', KEYS[1])
if ARGV[2] == '1' then
  if cur then return {'conflict', cur} end
elseif not cur then
  return {'conflict'}
elseif cur ~= ARGV[1] then
  return {'conflict', cur}
end
local version = tonumber(ARGV[5])
if cur then
  local rec = decode(cur)
  if not rec then return {'garbage', cur} end
  if rec.version > version then version = rec.version end
end
local new = record(ARGV[3], version + 1, ARGV[4], 'held', ARGV[8])
redis.call('SET', KEYS[1], new, 'PX', ARGV[6])
redis.call('PUBLISH', ARGV[7], new)
return {'ok', new}
`)

// ownedLua checks that the key holds the caller's record: ARGV[1] holder,
// ARGV[2] token, ARGV[3] version, state held. It returns the decoded record
// or an early reply.
const ownedLua = `
local function owned()
  local cur = redis.call('GET', KEYS[1])
  if not cur then return nil, {'missing'} end
  local rec = decode(cur)
  if not rec then return nil, {'garbage', cur} end
  if rec.holder ~= ARGV[1] or rec.token ~= ARGV[2] or rec.state ~= 'held' or
     string.format('%d', rec.version) ~= ARGV[3] then
    return nil, {'lost', cur}
  end
  return rec, nil
end
`

// renewScript: KEYS[1] lease key. ARGV: holder, token, version, ttl ms,
// lease span ms.
var renewScript = redis.NewScript(recordLua + ownedLua + `
local rec, reply = owned()
if not rec then return reply end
local new = record(ARGV[1], rec.version + 1, ARGV[2], 'held', ARGV[5])
redis.call('SET', KEYS[1], new, 'PX', ARGV[4])
return {'ok', new}
`)

// releaseScript: KEYS[1] lease key. ARGV: holder, token, version, ttl ms,
// lease span ms, events channel. Writes a released record (a standby may
// acquire over it at once) and publishes it.
var releaseScript = redis.NewScript(recordLua + ownedLua + `
local rec, reply = owned()
if not rec then return reply end
local new = record(ARGV[1], rec.version + 1, ARGV[2], 'released', ARGV[5])
redis.call('SET', KEYS[1], new, 'PX', ARGV[4])
redis.call('PUBLISH', ARGV[6], new)
return {'ok', new}
`)

// overwriteScript is the operator's escape hatch: KEYS[1] lease key. ARGV:
// expected value, "1" if expected missing, holder, token, version, ttl ms,
// events channel. It replaces exactly the value the operator was shown
// (garbage included) with a released record.
var overwriteScript = redis.NewScript(recordLua + `
local cur = redis.call('GET', KEYS[1])
if ARGV[2] == '1' then
  if cur then return {'conflict', cur} end
elseif cur ~= ARGV[1] then
  if cur then return {'conflict', cur} end
  return {'conflict'}
end
local new = record(ARGV[3], tonumber(ARGV[5]), ARGV[4], 'released', '0')
redis.call('SET', KEYS[1], new, 'PX', ARGV[6])
redis.call('PUBLISH', ARGV[7], new)
return {'ok', new}
`)
