// node `redis` (v6) on its default settings against kvarray serve: connect,
// binary GET/SET, pipeline, transaction with WATCH, expiry, INCR.
// Usage: node noderedis.js PORT. Prints "ok", or what failed and exits 1.
const { createClient, commandOptions } = require('redis');

const port = Number(process.argv[2]);
function check(cond, what) { if (!cond) throw new Error(what); }

async function main() {
  const c = createClient({ url: `redis://127.0.0.1:${port}` });
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
  await other.quit();
  await c.quit();
}

main().then(() => console.log('ok')).catch((e) => { console.log('FAIL:', e.message); process.exit(1); });
