#pragma once
// The Lua scripts the Redis sink and consumer run on the server (EVAL/EVALSHA), each atomic. The
// consumer's are flagged allow-oom: a server at maxmemory must still let a consumer take, renew
// and read its streams, which is how memory is freed.

namespace outbox::redis {

// KEYS[1] the stream, KEYS[2] its dedup set; ARGV[1] the event id, ARGV[2] the window (ms),
// ARGV[3...] the entry's fields. Returns the new entry's id, or 0 for an id appended within the
// window. One script: the id is recorded with the append or not at all.
inline constexpr const char* kPublishScript = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then return 0 end
local id = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 3))
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('PEXPIRE', KEYS[2], window)
return id
)lua";

// KEYS[1] the stream; ARGV[1] the retention (ms). Removes entries older than the retention that
// every consumer group has acknowledged: a group needs its oldest pending entry and, when nothing
// is pending, the first entry after the last it was handed (none: it needs nothing). Returns
// {entries removed, ms the oldest needed entry is past the retention (0: none held back)}.
inline constexpr const char* kTrimScript = R"lua(
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cut_ms, cut_seq = now - tonumber(ARGV[1]), 0
if cut_ms <= 0 then return {0, 0} end
local function split(id)
  local dash = string.find(id, '-', 1, true)
  return tonumber(string.sub(id, 1, dash - 1)), tonumber(string.sub(id, dash + 1))
end
local held = false
for _, group in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local info = {}
  for i = 1, #group, 2 do info[group[i]] = group[i + 1] end
  local needed = nil
  if info['pending'] > 0 then
    needed = redis.call('XPENDING', KEYS[1], info['name'])[2]
  else
    local next = redis.call('XRANGE', KEYS[1], '(' .. info['last-delivered-id'], '+', 'COUNT', 1)
    if #next > 0 then needed = next[1][1] end
  end
  if needed then
    local ms, seq = split(needed)
    if ms < cut_ms or (ms == cut_ms and seq < cut_seq) then
      cut_ms, cut_seq, held = ms, seq, true
    end
  end
end
local removed = redis.call('XTRIM', KEYS[1], 'MINID', cut_ms .. '-' .. cut_seq)
if held then return {removed, now - tonumber(ARGV[1]) - cut_ms} end
return {removed, 0}
)lua";

// KEYS: the locks; ARGV[1] this process's token, ARGV[2] the lease (ms). Per lock: 1 held and
// renewed, 2 taken now, 0 another process holds it.
inline constexpr const char* kLockScript = R"lua(#!lua flags=allow-oom
local out = {}
for i, key in ipairs(KEYS) do
  local holder = redis.call('GET', key)
  if holder == ARGV[1] then
    redis.call('PEXPIRE', key, ARGV[2])
    out[i] = 1
  elseif not holder then
    redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
    out[i] = 2
  else
    out[i] = 0
  end
end
return out
)lua";

// KEYS: the locks; ARGV[1] this process's token. Lets go of those it holds.
inline constexpr const char* kUnlockScript = R"lua(#!lua flags=allow-oom
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then redis.call('DEL', key) end
end
return 0
)lua";

// KEYS[1..n] the streams, KEYS[n+1..2n] their locks; ARGV[1] the group, ARGV[2] the consumer,
// ARGV[3] this process's token, ARGV[4] the count, ARGV[5..4+n] per stream "0" (this consumer's
// pending entries) or ">" (new ones). XREADGROUP on the streams whose lock this process holds
// now, so a process whose lock lapsed can take nothing; the reply as XREADGROUP's.
inline constexpr const char* kReadScript = R"lua(#!lua flags=allow-oom
local n = #KEYS / 2
local out = {}
for i = 1, n do
  if redis.call('GET', KEYS[n + i]) == ARGV[3] then
    local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[4], 'STREAMS',
                        KEYS[i], ARGV[4 + i])
    if r then out[#out + 1] = r[1] end
  end
end
return out
)lua";

}  // namespace outbox::redis
