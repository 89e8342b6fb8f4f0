"""redis-py on its default settings (RESP3 since 8.0) against kvarray serve,
sync and asyncio: connect, binary GET/SET, pipeline, transaction with WATCH,
expiry, INCR. Usage: python3 redispy.py PORT. Prints "ok" and exits 0, or
prints what failed and exits 1."""
import asyncio
import sys
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


try:
    sync_client()
    asyncio.run(async_client())
except Exception as e:  # noqa: BLE001 - report any failure
    print(f"FAIL: {type(e).__name__}: {e}")
    sys.exit(1)
print("ok")
