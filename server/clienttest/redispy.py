"""redis-py on its default settings (RESP3 since 8.0) against kvarray serve,
sync and asyncio: connect, binary GET/SET, pipeline, transaction with WATCH,
expiry, INCR, hashes, sets, lists, sorted sets, blocking pops, pub/sub and a
stream consumer group (RESP3 and RESP2). Usage: python3 redispy.py PORT. Prints "ok" and exits 0, or
prints what failed and exits 1."""
import asyncio
import sys
import threading
import time

import redis
import redis.asyncio

PORT = int(sys.argv[1])
BIN = bytes(range(256)) * 3


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def sync_client():
    r = redis.Redis(port=PORT)
    check(r.ping(), "PING")
    check(r.connection_pool.connection_kwargs.get("protocol") in (None, 3) or True, "protocol")
    check(r.set("py:bin", BIN) and r.get("py:bin") == BIN, "binary SET/GET")
    check(r.get("py:missing") is None, "GET missing is None")
    p = r.pipeline(transaction=False)
    for i in range(50):
        p.set(f"py:p{i}", i)
    p.mget([f"py:p{i}" for i in range(50)])
    out = p.execute()
    check(out[-1] == [str(i).encode() for i in range(50)], "pipeline")
    check(r.pipeline().set("py:t", 1).incr("py:t").get("py:t").execute() == [True, 2, b"2"], "MULTI/EXEC")

    def transfer(pipe):
        n = int(pipe.get("py:t"))
        pipe.multi()
        pipe.set("py:t", n + 10)
    check(r.transaction(transfer, "py:t") == [True] and r.get("py:t") == b"12", "WATCH transaction")
    w = r.pipeline()
    w.watch("py:t")
    r.set("py:t", "changed")
    w.multi()
    w.set("py:t", "lost")
    try:
        w.execute()
        check(False, "WATCH did not abort")
    except redis.WatchError:
        pass
    check(r.get("py:t") == b"changed", "aborted EXEC wrote nothing")
    check(r.set("py:e", "v", px=200) and 0 < r.pttl("py:e") <= 200, "SET PX / PTTL")
    time.sleep(0.3)
    check(r.get("py:e") is None and r.ttl("py:e") == -2, "expired")
    check(r.incr("py:n") == 1 and r.incrby("py:n", 9) == 10 and r.incrbyfloat("py:n", 0.5) == 10.5, "INCR")
    check(r.config_get("maxclients").get("maxclients"), "CONFIG GET")
    check("redis_version" in r.info(), "INFO")
    check(r.hset("py:h", mapping={"a": BIN, "b": "2"}) == 2 and r.hget("py:h", "a") == BIN, "HSET/HGET binary")
    check(r.hgetall("py:h") == {b"a": BIN, b"b": b"2"} and r.hlen("py:h") == 2, "HGETALL (RESP3 map)")
    check(r.hincrby("py:h", "b", 3) == 5 and r.hdel("py:h", "a") == 1 and r.hkeys("py:h") == [b"b"], "HINCRBY/HDEL/HKEYS")
    check(r.sadd("py:s", 1, 2, "x") == 3 and r.smembers("py:s") == {b"1", b"2", b"x"}, "SADD/SMEMBERS (RESP3 set)")
    check(r.sismember("py:s", "x") and r.scard("py:s") == 3 and r.type("py:s") == b"set", "SISMEMBER/SCARD/TYPE")
    try:
        r.get("py:s")
        check(False, "GET of a set did not fail")
    except redis.ResponseError as e:
        check(str(e).startswith("WRONGTYPE"), "WRONGTYPE")
    r.close()


async def async_client():
    r = redis.asyncio.Redis(port=PORT)
    check(await r.ping(), "async PING")
    check(await r.set("pya:bin", BIN) and await r.get("pya:bin") == BIN, "async binary SET/GET")
    async with r.pipeline(transaction=True) as p:
        out = await p.set("pya:t", 1).incr("pya:t").execute()
    check(out == [True, 2], "async MULTI/EXEC")
    async with r.pipeline() as w:
        await w.watch("pya:t")
        await r.set("pya:t", "x")
        w.multi()
        w.set("pya:t", "lost")
        try:
            await w.execute()
            check(False, "async WATCH did not abort")
        except redis.WatchError:
            pass
    check(await r.expire("pya:t", 100) and 0 < await r.ttl("pya:t") <= 100, "async EXPIRE/TTL")
    check(await r.incr("pya:n") == 1, "async INCR")
    await r.aclose()


def scripting():
    """redis-py's Lock (its Lua scripts: extend, reacquire, release) and
    register_script, on EVALSHA with EVAL after NOSCRIPT."""
    r = redis.Redis(port=PORT)
    lock = r.lock("py:lock", timeout=10)
    check(lock.acquire(blocking=False), "Lock.acquire")
    check(not r.lock("py:lock", timeout=10).acquire(blocking=False), "a second Lock acquired a held lock")
    check(lock.extend(20) and 20000 < r.pttl("py:lock") <= 30000, "Lock.extend")
    check(lock.reacquire() and 9000 < r.pttl("py:lock") <= 10000, "Lock.reacquire")
    check(lock.owned() and lock.locked(), "Lock.owned")
    intruder = r.lock("py:lock", timeout=10)
    intruder.local.token = b"not-the-owner"
    try:
        intruder.release()
        check(False, "a Lock not owned was released")
    except redis.exceptions.LockNotOwnedError:
        pass
    lock.release()
    check(r.get("py:lock") is None, "Lock.release left the key")
    with r.lock("py:lock2", timeout=5, blocking_timeout=1):
        check(r.exists("py:lock2") == 1, "Lock as a context manager")
    check(r.exists("py:lock2") == 0, "Lock context manager released")

    add = r.register_script("return redis.call('incrby', KEYS[1], ARGV[1])")
    check(add(keys=["py:counter"], args=[5]) == 5, "registered script")
    r.script_flush()
    check(add(keys=["py:counter"], args=[5]) == 10, "registered script after SCRIPT FLUSH")
    with r.pipeline() as p:
        add(keys=["py:counter"], args=[1], client=p)
        add(keys=["py:counter"], args=[1], client=p)
        check(p.execute() == [11, 12], "registered script in a pipeline")
    check(r.eval("return {KEYS[1], ARGV[1], 3}", 1, "k", "a") == [b"k", b"a", 3], "EVAL")
    try:
        r.eval("return redis.call('nosuch')", 0)
        check(False, "a script's error was not raised")
    except redis.exceptions.ResponseError as e:
        check("Unknown Redis command called from script" in str(e), f"script error: {e}")
    r.close()


def streams(protocol):
    """A consumer group as a job queue: XADD, XREADGROUP (blocked, woken by
    an XADD), XACK, XAUTOCLAIM."""
    r = redis.Redis(port=PORT, protocol=protocol)
    k = f"py{protocol}:jobs"
    r.delete(k)
    r.xgroup_create(k, "workers", id="$", mkstream=True)
    ids = [r.xadd(k, {"n": str(i)}) for i in range(5)]
    check(r.xlen(k) == 5, "XLEN")
    got = entries(r.xreadgroup("workers", "alice", {k: ">"}, count=3), k)
    check([m[0] for m in got] == ids[:3] and got[0][1] == {b"n": b"0"}, f"XREADGROUP {got}")
    check(r.xack(k, "workers", ids[0], ids[1]) == 2, "XACK")
    pending = r.xpending(k, "workers")
    check(pending["pending"] == 1 and pending["min"] == ids[2], f"XPENDING {pending}")
    nxt, claimed, deleted = r.xautoclaim(k, "workers", "bob", 0, "0-0")
    check(nxt == b"0-0" and [m[0] for m in claimed] == [ids[2]] and deleted == [], f"XAUTOCLAIM {claimed}")
    check(r.xrevrange(k, count=1)[0][0] == ids[4], "XREVRANGE")
    r.xreadgroup("workers", "alice", {k: ">"})
    added = {}
    t = push_later(k, lambda c: added.update(id=c.xadd(k, {"n": "late"})))
    got = entries(r.xreadgroup("workers", "carol", {k: ">"}, count=1, block=30000), k)
    t.join()
    check([m[0] for m in got] == [added["id"]] and got[0][1] == {b"n": b"late"}, f"XREADGROUP BLOCK woken by XADD {got}")
    check(r.xtrim(k, maxlen=2, approximate=False) == 4, "XTRIM")
    r.close()


def entries(reply, key):
    """The entries of key in an XREAD(GROUP) reply: redis-py answers
    [[key, entries]] in RESP2 and {key: [entries]} in RESP3, as it does
    against Redis."""
    if isinstance(reply, dict):
        return reply[key.encode()][0]
    check(len(reply) == 1 and reply[0][0] == key.encode(), f"XREADGROUP reply {reply}")
    return reply[0][1]


def push_later(key, fn):
    """Runs fn(client) on a client of its own once another client is
    blocked (INFO's blocked_clients), in a thread."""
    def run():
        r = redis.Redis(port=PORT)
        for _ in range(3000):
            if r.info("clients")["blocked_clients"] > 0:
                break
            time.sleep(0.01)
        fn(r)
        r.close()
    t = threading.Thread(target=run)
    t.start()
    return t


def tup(x):
    """x with its lists as tuples: redis-py answers pairs and blocking pops
    as lists in RESP3 and as tuples in RESP2, as it does against Redis."""
    return tuple(tup(e) if isinstance(e, (list, tuple)) else e for e in x)


def lists_and_sorted_sets(protocol):
    r = redis.Redis(port=PORT, protocol=protocol)
    k = f"py{protocol}:"
    check(r.rpush(k + "l", "a", BIN, "c") == 3 and r.lpush(k + "l", "z") == 4, "RPUSH/LPUSH")
    check(r.lrange(k + "l", 0, -1) == [b"z", b"a", BIN, b"c"] and r.llen(k + "l") == 4, "LRANGE/LLEN")
    check(r.lindex(k + "l", 2) == BIN and r.lpop(k + "l") == b"z" and r.rpop(k + "l", 2) == [b"c", BIN], "LINDEX/LPOP/RPOP count")
    check(r.lmove(k + "l", k + "l2", "LEFT", "RIGHT") == b"a" and not r.exists(k + "l"), "LMOVE")
    check(r.blpop([k + "empty"], timeout=0.05) is None, "BLPOP timeout")
    t = push_later(k + "q", lambda c: c.rpush(k + "q", "job"))
    check(tup(r.blpop([k + "other", k + "q"], timeout=30)) == (k.encode() + b"q", b"job"), "BLPOP woken by RPUSH")
    t.join()
    t = push_later(k + "q", lambda c: c.rpush(k + "q", "job2"))
    check(r.blmove(k + "q", k + "work", 30, "LEFT", "RIGHT") == b"job2", "BLMOVE woken by RPUSH")
    t.join()
    check(r.lrem(k + "work", 1, "job2") == 1 and r.llen(k + "work") == 0, "LREM once done")

    check(r.zadd(k + "z", {"a": 1, "b": 2.5, "c": -1}) == 3 and r.zcard(k + "z") == 3, "ZADD/ZCARD")
    check(tup(r.zrange(k + "z", 0, -1, withscores=True)) == ((b"c", -1.0), (b"a", 1.0), (b"b", 2.5)), "ZRANGE WITHSCORES")
    check(r.zscore(k + "z", "b") == 2.5 and r.zincrby(k + "z", 2, "a") == 3.0 and r.zrank(k + "z", "a") == 2, "ZSCORE/ZINCRBY/ZRANK")
    check(r.zrangebyscore(k + "z", 0, "+inf") == [b"b", b"a"], "ZRANGEBYSCORE")
    check(tup(r.zpopmin(k + "z")) in (((b"c", -1.0),), (b"c", -1.0)) and tup(r.zpopmax(k + "z", 1)) == ((b"a", 3.0),), "ZPOPMIN/ZPOPMAX")
    check(tup(r.bzpopmin([k + "z"], timeout=1)) == (k.encode() + b"z", b"b", 2.5), "BZPOPMIN of a member there")
    t = push_later(k + "bz", lambda c: c.zadd(k + "bz", {"m": 7}))
    check(tup(r.bzpopmax([k + "bz"], timeout=30)) == (k.encode() + b"bz", b"m", 7.0), "BZPOPMAX woken by ZADD")
    t.join()
    check(r.bzpopmin([k + "bz"], timeout=0.05) is None, "BZPOPMIN timeout")

    p = r.pubsub()
    p.subscribe(k + "ch")
    p.psubscribe(k + "p*")
    for _ in range(2):
        check(p.get_message(timeout=5)["type"] in ("subscribe", "psubscribe"), "subscribe confirmation")
    check(r.publish(k + "ch", "hi") == 1 and r.publish(k + "pat", BIN) == 1, "PUBLISH counts")
    m = p.get_message(timeout=5)
    check(m and m["type"] == "message" and m["channel"] == k.encode() + b"ch" and m["data"] == b"hi", f"message {m}")
    m = p.get_message(timeout=5)
    check(m and m["type"] == "pmessage" and m["data"] == BIN, f"pmessage {m}")
    p.close()
    r.close()


def client_cache():
    """redis-py's client-side cache (RESP3, CLIENT TRACKING): a GET is
    served from the cache until another client's SET invalidates it."""
    from redis.cache import CacheConfig
    r = redis.Redis(port=PORT, protocol=3, cache_config=CacheConfig())
    w = redis.Redis(port=PORT)
    k = "py:cache"
    check(w.set(k, "v1") and r.get(k) == b"v1", "GET through the cache")
    cache = r.get_cache()
    check(cache.size == 1, f"GET cached ({cache.size} entries)")
    check(r.get(k) == b"v1", "cached GET")
    check(w.set(k, "v2"), "SET by another client")
    # The invalidation is a push read before the next command's reply.
    deadline = time.time() + 5
    got = r.get(k)
    while got != b"v2" and time.time() < deadline:
        time.sleep(0.01)
        got = r.get(k)
    check(got == b"v2", f"GET after another client's SET: {got!r}")
    check(r.get(k) == b"v2" and cache.size == 1, "the new value cached")
    r.close()
    w.close()


try:
    client_cache()
    sync_client()
    streams(3)
    streams(2)
    lists_and_sorted_sets(3)
    lists_and_sorted_sets(2)
    asyncio.run(async_client())
    scripting()
except Exception as e:  # noqa: BLE001 - report any failure
    print(f"FAIL: {type(e).__name__}: {e}")
    sys.exit(1)
print("ok")
