package redislease

import (
	"github.com/redis/go-redis/v9"
)

// The Lua scripts are the only writers of lease keys. Each reads the key,
// checks ownership and writes in one atomic step. Replies are arrays whose
// first element says what happened:
//
//	{"ok", new}         the write happened; new is the record written
//	{"conflict", cur}   acquire: the key is not what the caller saw (cur absent if missing)
//	{"lost", cur}       renew, release: someone else holds it, or a newer version
//	{"missing"}         renew, release: the key does not exist
//	{"garbage", cur}    the key holds something that is not a record
//	{"garbage", v, key} a unit key holds something that is not a unit record
//	{"claimed", key, v} a unit key names another lease (v absent if missing)
//	{"disabled"}        acquire: an operator disabled the lease
//
// KEYS[1] is the lease key; KEYS[2..] are the unit keys of the lease's
// units (none for a store call without units). A unit key holds the
// record of the lease that last claimed the unit, with that lease's name
// in front (unitLua); the holder writes it in the same script as the
// lease key, so it changes exactly when the lease's record does.
//
// Records are built by concatenation in a fixed field order. Holder and
// token are restricted (ValidNode, hex) so they need no escaping, lease
// names are restricted to the characters of unit names and passed already
// escaped, and versions are formatted with %d so Lua never writes 1e+15.

// recordLua builds the record for holder, version, token, state, span.
// getv reads a key as GET does, but never more than MaxValue bytes of it:
// a key of another type than a string, or a longer string, reads as its
// marker (Odd.marker: type, length, first 64 bytes), which is never a
// record, so every script takes it for garbage, and its replies stay
// small. A string that looks like a marker reads as its own marker, so
// that no value reads as another's.
// nowms is the answering server's clock in milliseconds (TIME): the floor
// of every version an acquisition or a reset writes. Renewals add one to
// the version, far fewer than one per millisecond, so a tenure's versions
// stay below its acquisition's time plus the milliseconds it lasted, and
// an acquisition made a lease span after the writes a rollback lost
// writes a larger version than any of them (the fencing token stays
// strictly increasing) while the servers' clocks agree within a lease
// span.
const recordLua = `
local function getv(k)
  local t = redis.call('TYPE', k)['ok']
  if t == 'none' then return false end
  if t ~= 'string' then return '\0odd:' .. t .. ':0:' end
  local n = redis.call('STRLEN', k)
  local v = n <= ` + maxValueLua + ` and redis.call('GET', k)
  if not v or string.sub(v, 1, 5) == '\0odd:' then
    return '\0odd:string:' .. string.format('%d', n) .. ':' .. redis.call('GETRANGE', k, 0, 63)
  end
  return v
end
local function nowms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function record(holder, version, token, state, span, next)
  local tail = '}'
  if next and next ~= '' then tail = ',"next":"' .. next .. '"}' end
  return '{"holder":"' .. holder .. '","version":' .. string.format('%d', version) ..
    ',"token":"' .. token .. '","state":"' .. state .. '","lease_span_ms":' .. span .. tail
end
local function decode(raw)
  local ok, rec = pcall(cjson.decode, raw)
  if not ok or type(rec) ~= 'table' or type(rec.version) ~= 'number' or
     rec.version < 1 or rec.version ~= math.floor(rec.version) or
     type(rec.holder) ~= 'string' or type(rec.token) ~= 'string' or
     (rec.state ~= 'held' and rec.state ~= 'released' and rec.state ~= 'stop_failed') or
     rec.next ~= nil and (rec.state ~= 'released' or type(rec.next) ~= 'string' or
       #rec.next > 253 or not string.find(rec.next, '^[A-Za-z0-9][A-Za-z0-9%._%-]*$')) then return nil end
  return rec
end
` + unitLua

// unitLua reads and writes unit keys. unitvalue is the unit key's value for
// lease (escaped) and the lease's record rec: the record with the lease's
// name as its first field. unitrec decodes a unit key's value only if it is
// exactly what unitvalue writes (DecodeUnit is the same rule in Go): the
// lease field as the scripts escape it, then a record field for field as
// record writes it. It returns the record with lease set to the escaped
// name, or nil: garbage, which no script writes over.
const unitLua = `
local function unitvalue(lease, rec)
  return '{"lease":"' .. lease .. '",' .. string.sub(rec, 2)
end
local maxint = 9007199254740991
local function unitrec(raw)
  local lease, rest = string.match(raw, '^{"lease":"([^"]*)",(.*)$')
  if not lease or lease == '' or
     string.find((string.gsub(lease, '\\\\', '')), '[^A-Za-z0-9:_%.@%-]') then return nil end
  local body = '{' .. rest
  local rec = decode(body)
  if not rec or rec.version > maxint or type(rec.lease_span_ms) ~= 'number' or
     rec.lease_span_ms < 0 or rec.lease_span_ms > 3600000 or
     rec.lease_span_ms ~= math.floor(rec.lease_span_ms) or
     #rec.holder > 253 or not string.find(rec.holder, '^[A-Za-z0-9][A-Za-z0-9%._%-]*$') or
     #rec.token ~= 32 or not string.find(rec.token, '^[0-9a-f]*$') or
     record(rec.holder, rec.version, rec.token, rec.state, string.format('%d', rec.lease_span_ms), rec.next) ~= body then
    return nil
  end
  rec.lease = lease
  return rec
end
-- live is a unit key's value when it names another lease than ARGV[n]
-- with a live record (held or stop_failed), '' when it names none
-- (missing, this lease, or a released record); nil and the garbage reply
-- when it is not a unit record.
local function live(i, n)
  local v = getv(KEYS[i])
  if not v then return '' end
  local u = unitrec(v)
  if not u then return nil, {'garbage', v, KEYS[i]} end
  if u.lease ~= ARGV[n] and u.state ~= 'released' then return v end
  return ''
end
`

// acquireScript: KEYS[1] lease key, KEYS[2..] unit keys. ARGV: expected
// value, "1" if the caller saw the key missing, holder, token, floor
// version, ttl ms, events channel, lease span ms, lease name (escaped), then
// for each unit key the value of another lease's live record the caller
// observed and aged there (empty for none). Compare-and-set on exactly the
// bytes observed, the unit keys included: a unit key that names another
// lease's live record other than the one aged is refused ('claimed'). The
// new version is one above both the old one and the caller's floor (the
// highest version it has seen, which survives a Redis data loss) and the
// server's clock in milliseconds (recordLua's nowms: above every version
// a rollback lost). The unit keys are claimed: each gets the new record
// under this lease's name. The last ARGV is the lease's disabled marker
// (DisabledKey): while it exists, nothing is written ('disabled'). TYPE,
// not EXISTS: the ACL of an earlier version grants it.
var acquireScript = redis.NewScript(recordLua + `
if redis.call('TYPE', ARGV[#ARGV])['ok'] ~= 'none' then return {'disabled'} end
local cur = getv(KEYS[1])
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
  -- Its holder could not stop the units: never acquired over.
  if rec.state == 'stop_failed' then return {'conflict', cur} end
  if rec.version > version then version = rec.version end
end
local now = nowms()
if now > version then version = now end
-- Each unit key must hold exactly what the caller saw of another lease
-- there (its record in any state), or nothing of another lease. A
-- missing one makes the acquisition fresh: it could come back missing
-- after a data loss, so the caller confirms before it starts.
local fresh = false
for i = 2, #KEYS do
  local v = getv(KEYS[i])
  local other = ''
  if v then
    local u = unitrec(v)
    if not u then return {'garbage', v, KEYS[i]} end
    if u.lease ~= ARGV[9] then
      other = v
      if u.state == 'stop_failed' then return {'claimed', KEYS[i], v} end
    end
  else
    fresh = true
  end
  if other ~= ARGV[8 + i] then return {'claimed', KEYS[i], v} end
end
local new = record(ARGV[3], version + 1, ARGV[4], 'held', ARGV[8])
redis.call('SET', KEYS[1], new, 'PX', ARGV[6])
for i = 2, #KEYS do
  redis.call('SET', KEYS[i], unitvalue(ARGV[9], new), 'PX', ARGV[6])
end
redis.call('PUBLISH', ARGV[7], new)
if fresh then return {'ok', new, 'fresh'} end
return {'ok', new}
`)

// ownedLua checks that the key holds the caller's record: ARGV[1] holder,
// ARGV[2] token, ARGV[3] version, state held or stop_failed. A record of
// the caller's with an older version (same holder and token: only the
// caller ever wrote one) is its own earlier renewal, which a store that
// rolled back brought back: still the caller's, and written over
// (rule 8: a leader rides through). It returns the decoded
// record, its version raised to ARGV[3], or an early reply.
const ownedLua = `
local function owned()
  local cur = getv(KEYS[1])
  if not cur then return nil, {'missing'} end
  local rec = decode(cur)
  if not rec then return nil, {'garbage', cur} end
  local held = tonumber(ARGV[3])
  if rec.holder ~= ARGV[1] or rec.token ~= ARGV[2] or rec.state == 'released' or
     rec.version > held then
    return nil, {'lost', cur}
  end
  rec.version = held
  return rec, nil
end
`

// unitsLua checks a lease's unit keys before its holder writes them:
// checkunits returns, for each unit key, whether to leave it (garbage,
// which is never written over, or with keep, another lease's record), and
// the first garbage reply; or nil and the 'claimed' reply when a unit key
// names another lease's live record. writeunits writes rec under this
// lease's name to the others. okreply adds the garbage unit key, if any,
// to an 'ok' reply: the write happened, and that key was left alone.
const unitsLua = `
local function checkunits(n, keep)
  local skip, garbage = {}, nil
  for i = 2, #KEYS do
    local v, reply = live(i, n)
    if not v then
      skip[i] = true
      garbage = garbage or reply
    elseif v ~= '' then
      if not keep then return nil, {'claimed', KEYS[i], v} end
      skip[i] = true
    elseif keep then
      local cur = getv(KEYS[i])
      if cur and unitrec(cur).lease ~= ARGV[n] then skip[i] = true end
    end
  end
  return skip, garbage
end
local function writeunits(n, rec, ttl, skip)
  for i = 2, #KEYS do
    if not skip[i] then redis.call('SET', KEYS[i], unitvalue(ARGV[n], rec), 'PX', ttl) end
  end
end
local function okreply(new, garbage)
  if garbage then return {'ok', new, garbage[3], garbage[2]} end
  return {'ok', new}
end
`

// renewScript: KEYS[1] lease key, KEYS[2..] unit keys. ARGV: holder,
// token, version, ttl ms, lease span ms, lease name (escaped), the state
// to write (held, or stop_failed while the holder cannot stop). The unit
// keys get the new record too (claimed again if they were missing or
// named another lease's released record); one that names another lease's
// live record is a loss: the unit was taken under that lease, and nothing
// is written.
var renewScript = redis.NewScript(recordLua + ownedLua + unitsLua + `
local rec, reply = owned()
if not rec then return reply end
local skip, garbage = checkunits(6, false)
if not skip then return garbage end
local new = record(ARGV[1], rec.version + 1, ARGV[2], ARGV[7], ARGV[5])
redis.call('SET', KEYS[1], new, 'PX', ARGV[4])
writeunits(6, new, ARGV[4], skip)
return okreply(new, garbage)
`)

// releaseScript: KEYS[1] lease key, KEYS[2..] unit keys. ARGV: holder,
// token, version, ttl ms, lease span ms, events channel, lease name
// (escaped), the node the release offers the lease to ("" for any).
// Writes a released record (a standby may acquire over it at once; only
// the node named in next, if any, until the lease span passed) and
// publishes it. The unit keys that are missing or name this
// lease get the released record; those that name another lease keep it
// (the release still happens: the units are confirmed inactive).
var releaseScript = redis.NewScript(recordLua + ownedLua + unitsLua + `
local rec, reply = owned()
if not rec then return reply end
local skip, garbage = checkunits(7, true)
local new = record(ARGV[1], rec.version + 1, ARGV[2], 'released', ARGV[5], ARGV[8])
redis.call('SET', KEYS[1], new, 'PX', ARGV[4])
writeunits(7, new, ARGV[4], skip)
redis.call('PUBLISH', ARGV[6], new)
return okreply(new, garbage)
`)

// clearScript is the operator's word that a node whose stop failed was
// cleaned up by hand: KEYS[1] lease key, KEYS[2..] unit keys that named
// the lease's record when the operator looked. ARGV: expected value (a
// stop_failed record), ttl ms, events channel, lease name (escaped). It
// replaces exactly that record with a released one in its holder's name
// and token, as the holder would have released it once its units
// stopped (so a standby that saw the stop_failed record tells it from a
// reset, which names another holder), and the unit keys that still hold
// it, under this lease's name, with the same.
var clearScript = redis.NewScript(recordLua + `
local cur = getv(KEYS[1])
if cur ~= ARGV[1] then
  if cur then return {'conflict', cur} end
  return {'conflict'}
end
local rec = decode(cur)
if not rec then return {'garbage', cur} end
if rec.state ~= 'stop_failed' then return {'conflict', cur} end
local new = record(rec.holder, rec.version + 1, rec.token, 'released', string.format('%d', rec.lease_span_ms))
redis.call('SET', KEYS[1], new, 'PX', ARGV[2])
for i = 2, #KEYS do
  if getv(KEYS[i]) == unitvalue(ARGV[4], cur) then
    redis.call('SET', KEYS[i], unitvalue(ARGV[4], new), 'PX', ARGV[2])
  end
end
redis.call('PUBLISH', ARGV[3], new)
return {'ok', new}
`)

// overwriteLua ends both overwrite scripts once the check passed: ARGV[3]
// holder, ARGV[4] token, ARGV[5] version, ARGV[6] ttl ms, ARGV[7] events
// channel. It writes a released record at that version or the server's
// clock in milliseconds, whichever is higher (as acquire), and publishes
// it.
const overwriteLua = `
local version = tonumber(ARGV[5])
local now = nowms() + 1
if now > version then version = now end
local new = record(ARGV[3], version, ARGV[4], 'released', '0')
redis.call('SET', KEYS[1], new, 'PX', ARGV[6])
redis.call('PUBLISH', ARGV[7], new)
return {'ok', new}
`

// maxValueLua is MaxValue for the scripts (a test checks they agree).
const maxValueLua = "65536"

// overwriteOddScript is overwriteScript for an odd value (Odd): KEYS[1]
// lease key. ARGV: its type and length as "TYPE:LENGTH", a string's first
// bytes, holder, token, version, ttl ms, events channel. It replaces the
// value if it still has that type, and a string that length and those
// first bytes (SET replaces a key of any type).
var overwriteOddScript = redis.NewScript(recordLua + `
local t = redis.call('TYPE', KEYS[1])['ok']
if t ~= string.match(ARGV[1], '^(.*):') then return {'conflict'} end
if t == 'string' and
   (redis.call('STRLEN', KEYS[1]) ~= tonumber(string.match(ARGV[1], ':(%d+)$')) or
    redis.call('GETRANGE', KEYS[1], 0, #ARGV[2] - 1) ~= ARGV[2]) then
  return {'conflict'}
end
` + overwriteLua)

// overwriteScript is the operator's escape hatch: KEYS[1] lease key. ARGV:
// expected value, "1" if expected missing, holder, token, version, ttl ms,
// events channel. It replaces exactly the value the operator was shown
// (garbage included) with a released record, at the version given or the
// server's clock in milliseconds, whichever is higher (as acquire).
var overwriteScript = redis.NewScript(recordLua + `
local cur = getv(KEYS[1])
if ARGV[2] == '1' then
  if cur then return {'conflict', cur} end
elseif cur ~= ARGV[1] then
  if cur then return {'conflict', cur} end
  return {'conflict'}
end
` + overwriteLua)
