// node `redis` (v6) on its default settings against kvarray serve: connect,
// binary GET/SET, pipeline, transaction with WATCH, expiry, INCR,
// scripts (defineScript, which sends EVALSHA then EVAL; scriptLoad),
// hashes, sets, lists, sorted sets, blocking pops, pub/sub and a stream
// consumer group (RESP2, the default, and RESP3).
// Usage: node noderedis.js PORT. Prints "ok", or what failed and exits 1.
const { createClient, commandOptions, defineScript } = require('redis');

const port = Number(process.argv[2]);
function check(cond, what) { if (!cond) throw new Error(what); }

async function main() {
  const c = createClient({
    url: `redis://127.0.0.1:${port}`,
    scripts: {
      add: defineScript({
        SCRIPT: "return redis.call('INCRBY', KEYS[1], ARGV[1])",
        NUMBER_OF_KEYS: 1,
        parseCommand(parser, key, n) { parser.pushKey(key); parser.push(String(n)); },
        transformReply: undefined,
      }),
    },
  });
  c.on('error', (e) => { console.log('FAIL: client error', e.message); process.exit(1); });
  await c.connect();
  check(await c.ping() === 'PONG', 'PING');
  const bin = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
  await c.set('node:bin', bin);
  const got = await c.withTypeMapping({ [36]: Buffer }).get('node:bin');
  check(Buffer.isBuffer(got) && got.equals(bin), 'binary GET/SET');
  check(await c.get('node:missing') === null, 'GET missing');
  const results = await Promise.all(Array.from({ length: 50 }, (_, i) => c.set(`node:p${i}`, String(i))));
  check(results.every((r) => r === 'OK'), 'pipeline (auto-pipelined)');
  const tx = await c.multi().set('node:t', '1').incr('node:t').get('node:t').exec();
  check(JSON.stringify(tx) === JSON.stringify(['OK', 2, '2']), `MULTI/EXEC ${JSON.stringify(tx)}`);
  const other = c.duplicate();
  await other.connect();
  await c.watch('node:t');
  await other.set('node:t', 'changed');
  let aborted = false;
  try {
    await c.multi().set('node:t', 'lost').exec();
  } catch (e) {
    aborted = e.constructor.name === 'WatchError' || /watch/i.test(e.message);
  }
  check(aborted, 'WATCH did not abort EXEC');
  check(await c.get('node:t') === 'changed', 'aborted EXEC wrote nothing');
  await c.set('node:e', 'v', { PX: 200 });
  const pttl = await c.pTTL('node:e');
  check(pttl > 0 && pttl <= 200, `PTTL ${pttl}`);
  await new Promise((r) => setTimeout(r, 300));
  check(await c.get('node:e') === null, 'expired key returned');
  check(await c.incr('node:n') === 1 && await c.incrBy('node:n', 9) === 10, 'INCR');
  check(await c.add('node:s', 5) === 5 && await c.add('node:s', 2) === 7, 'defineScript');
  const sha = await c.scriptLoad("return ARGV[1] .. KEYS[1]");
  check(await c.evalSha(sha, { keys: ['b'], arguments: ['a'] }) === 'ab', 'scriptLoad + evalSha');
  check(JSON.stringify(await c.eval("return {1, 'x', {ok='fine'}}")) === JSON.stringify([1, 'x', 'fine']), 'EVAL reply');
  check(await c.hSet('node:h', { a: '1', b: '2' }) === 2 && await c.hGet('node:h', 'a') === '1', 'HSET/HGET');
  const all = await c.hGetAll('node:h');
  check(all.a === '1' && all.b === '2' && await c.hLen('node:h') === 2, `HGETALL ${JSON.stringify(all)}`);
  check(await c.sAdd('node:set', ['x', 'y', 'x']) === 2 && await c.sIsMember('node:set', 'y'), 'SADD/SISMEMBER');
  const ms = await c.sMembers('node:set');
  check(ms.length === 2 && ms.includes('x') && ms.includes('y'), `SMEMBERS ${JSON.stringify(ms)}`);
  let wrong = false;
  try { await c.get('node:set'); } catch (e) { wrong = /^WRONGTYPE/.test(e.message); }
  check(wrong, 'WRONGTYPE');
  await other.quit();
  await c.quit();
  await listsAndSortedSets(2);
  await listsAndSortedSets(3);
  await streams(2);
  await streams(3);
}

// waitBlocked waits until INFO shows a blocked client.
async function waitBlocked(c) {
  for (let i = 0; i < 3000; i++) {
    if (/blocked_clients:[1-9]/.test(await c.info('clients'))) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error('no client blocked');
}

async function listsAndSortedSets(resp) {
  const c = createClient({ url: `redis://127.0.0.1:${port}`, RESP: resp });
  c.on('error', (e) => { console.log('FAIL: client error', e.message); process.exit(1); });
  await c.connect();
  const k = `node${resp}:`;
  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
  check(await c.rPush(k + 'l', ['a', 'b', 'c']) === 3 && await c.lPush(k + 'l', 'z') === 4, 'RPUSH/LPUSH');
  check(same(await c.lRange(k + 'l', 0, -1), ['z', 'a', 'b', 'c']) && await c.lLen(k + 'l') === 4, 'LRANGE/LLEN');
  check(await c.lIndex(k + 'l', 1) === 'a' && await c.lPop(k + 'l') === 'z' && await c.rPop(k + 'l') === 'c', 'LINDEX/LPOP/RPOP');
  check(await c.lMove(k + 'l', k + 'l2', 'LEFT', 'RIGHT') === 'a', 'LMOVE');
  const b = c.duplicate();
  await b.connect();
  check(await b.blPop(k + 'empty', 0.05) === null, 'BLPOP timeout');
  let popped = b.blPop([k + 'other', k + 'q'], 30);
  await waitBlocked(c);
  await c.rPush(k + 'q', 'job');
  let got = await popped;
  check(got && got.key === k + 'q' && got.element === 'job', `BLPOP woken by RPUSH: ${JSON.stringify(got)}`);
  popped = b.blMove(k + 'q', k + 'work', 'LEFT', 'RIGHT', 30);
  await waitBlocked(c);
  await c.rPush(k + 'q', 'job2');
  check(await popped === 'job2' && await c.lRem(k + 'work', 1, 'job2') === 1, 'BLMOVE woken by RPUSH, LREM');

  check(await c.zAdd(k + 'z', [{ score: 1, value: 'a' }, { score: 2.5, value: 'b' }, { score: -1, value: 'c' }]) === 3, 'ZADD');
  got = await c.zRangeWithScores(k + 'z', 0, -1);
  check(same(got, [{ value: 'c', score: -1 }, { value: 'a', score: 1 }, { value: 'b', score: 2.5 }]), `ZRANGE WITHSCORES ${JSON.stringify(got)}`);
  check(await c.zScore(k + 'z', 'b') === 2.5 && await c.zIncrBy(k + 'z', 2, 'a') === 3 && await c.zCard(k + 'z') === 3, 'ZSCORE/ZINCRBY/ZCARD');
  check(same(await c.zRangeByScore(k + 'z', 0, '+inf'), ['b', 'a']), 'ZRANGEBYSCORE');
  got = await c.zPopMin(k + 'z');
  check(got && got.value === 'c' && got.score === -1, `ZPOPMIN ${JSON.stringify(got)}`);
  popped = b.bzPopMax(k + 'bz', 30);
  await waitBlocked(c);
  await c.zAdd(k + 'bz', { score: 7, value: 'm' });
  got = await popped;
  check(got && got.key === k + 'bz' && got.value === 'm' && got.score === 7, `BZPOPMAX woken by ZADD: ${JSON.stringify(got)}`);
  check(await b.bzPopMin(k + 'bz', 0.05) === null, 'BZPOPMIN timeout');

  const sub = c.duplicate();
  await sub.connect();
  const msgs = [];
  await sub.subscribe(k + 'ch', (m, ch) => msgs.push([ch, m]));
  await sub.pSubscribe(k + 'p*', (m, ch) => msgs.push([ch, m]));
  check(await c.publish(k + 'ch', 'hi') === 1 && await c.publish(k + 'pat', 'there') === 1, 'PUBLISH counts');
  for (let i = 0; i < 500 && msgs.length < 2; i++) await new Promise((r) => setTimeout(r, 10));
  check(same(msgs, [[k + 'ch', 'hi'], [k + 'pat', 'there']]), `messages ${JSON.stringify(msgs)}`);
  await sub.unsubscribe(k + 'ch');
  check(await c.publish(k + 'ch', 'gone') === 0, 'PUBLISH after UNSUBSCRIBE');
  await sub.quit();
  await b.quit();
  await c.quit();
}

// entries is what an XREAD(GROUP) reply holds for key: node's redis
// answers [{name, messages}] in RESP2 and a map of key to messages in
// RESP3 (an object, or a Map), as it does against Redis.
function entries(reply, key) {
  if (Array.isArray(reply)) {
    check(reply.length === 1 && reply[0].name === key, `XREADGROUP reply ${JSON.stringify(reply)}`);
    return reply[0].messages;
  }
  const m = reply instanceof Map ? reply.get(key) : reply && reply[key];
  check(Array.isArray(m), `XREADGROUP reply ${JSON.stringify(reply)}`);
  return m.map((e) => (Array.isArray(e) ? { id: e[0], message: Object.fromEntries(toPairs(e[1])) } : e));
}

function toPairs(fields) {
  if (!Array.isArray(fields)) return Object.entries(fields);
  const out = [];
  for (let i = 0; i < fields.length; i += 2) out.push([fields[i], fields[i + 1]]);
  return out;
}

// streams: a consumer group as a job queue, a blocked XREADGROUP woken by
// XADD, XACK, XAUTOCLAIM.
async function streams(resp) {
  const c = createClient({ url: `redis://127.0.0.1:${port}`, RESP: resp });
  c.on('error', (e) => { console.log('FAIL: client error', e.message); process.exit(1); });
  await c.connect();
  const k = `node${resp}:jobs`;
  await c.del(k);
  await c.xGroupCreate(k, 'workers', '$', { MKSTREAM: true });
  const ids = [];
  for (let i = 0; i < 4; i++) ids.push(await c.xAdd(k, '*', { n: String(i) }));
  let read = entries(await c.xReadGroup('workers', 'alice', { key: k, id: '>' }, { COUNT: 2 }), k);
  check(read.map((m) => m.id).join() === ids.slice(0, 2).join() && read[0].message.n === '0', `XREADGROUP ${JSON.stringify(read)}`);
  check(await c.xAck(k, 'workers', ids[0]) === 1, 'XACK');
  const ac = await c.xAutoClaim(k, 'workers', 'bob', 0, '0-0');
  check(ac.nextId === '0-0' && ac.messages.length === 1 && ac.messages[0].id === ids[1] && ac.messages[0].message.n === '1', `XAUTOCLAIM ${JSON.stringify(ac)}`);
  check(await c.xLen(k) === 4, 'XLEN');
  await c.xReadGroup('workers', 'alice', { key: k, id: '>' });
  const b = c.duplicate();
  await b.connect();
  const blocked = b.xReadGroup('workers', 'carol', { key: k, id: '>' }, { COUNT: 1, BLOCK: 30000 });
  await waitBlocked(c);
  const id = await c.xAdd(k, '*', { n: 'late' });
  read = entries(await blocked, k);
  check(read.length === 1 && read[0].id === id && read[0].message.n === 'late', `XREADGROUP BLOCK woken by XADD ${JSON.stringify(read)}`);
  const p = await c.xPending(k, 'workers');
  check(p.pending === 4 && p.firstId === ids[1] && p.lastId === id, `XPENDING ${JSON.stringify(p)}`);
  await b.quit();
  await c.quit();
}

main().then(() => console.log('ok')).catch((e) => { console.log('FAIL:', e.message); process.exit(1); });
