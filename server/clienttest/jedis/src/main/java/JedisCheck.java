import java.util.List;
import java.util.Map;
import java.util.Set;

import redis.clients.jedis.Jedis;
import redis.clients.jedis.Pipeline;
import redis.clients.jedis.Response;
import redis.clients.jedis.Transaction;

/**
 * Jedis on its defaults against kvarray serve: strings, a pipeline, a
 * transaction, expiry, hashes, sets, lists, sorted sets and blocking pops.
 * Usage: java JedisCheck PORT.
 * Prints "ok" and exits 0, or what failed and exits 1.
 */
public class JedisCheck {
    static void check(boolean cond, String what) {
        if (!cond) {
            throw new AssertionError(what);
        }
    }

    public static void main(String[] args) {
        int port = Integer.parseInt(args[0]);
        try (Jedis r = new Jedis("127.0.0.1", port)) {
            check("PONG".equals(r.ping()), "PING");
            byte[] bin = new byte[768];
            for (int i = 0; i < bin.length; i++) {
                bin[i] = (byte) i;
            }
            r.set("j:bin".getBytes(), bin);
            check(java.util.Arrays.equals(r.get("j:bin".getBytes()), bin), "binary SET/GET");
            check(r.get("j:missing") == null, "GET missing");
            check(r.incr("j:n") == 1 && r.incrBy("j:n", 41) == 42, "INCR");
            r.setex("j:ttl", 100, "v");
            check(r.ttl("j:ttl") > 90, "SETEX/TTL");

            Pipeline p = r.pipelined();
            for (int i = 0; i < 50; i++) {
                p.set("j:p" + i, String.valueOf(i));
            }
            Response<String> last = p.get("j:p49");
            p.sync();
            check("49".equals(last.get()), "pipeline");

            r.watch("j:n");
            Transaction t = r.multi();
            t.incr("j:n");
            t.hset("j:h", "in-tx", "1");
            List<Object> res = t.exec();
            check(res != null && res.size() == 2 && ((Long) res.get(0)) == 43, "MULTI/EXEC");

            // Hashes.
            check(r.hset("j:h", Map.of("a", "1", "b", "2")) == 2, "HSET map");
            check("1".equals(r.hget("j:h", "a")), "HGET");
            check(r.hlen("j:h") == 3, "HLEN");
            Map<String, String> all = r.hgetAll("j:h");
            check(all.size() == 3 && "2".equals(all.get("b")), "HGETALL " + all);
            check(r.hincrBy("j:h", "a", 9) == 10, "HINCRBY");
            check(r.hdel("j:h", "a", "nofield") == 1, "HDEL");
            check(r.hexists("j:h", "b") && !r.hexists("j:h", "a"), "HEXISTS");
            check("hash".equals(r.type("j:h")), "TYPE hash");

            // Sets.
            check(r.sadd("j:s", "x", "y", "z") == 3, "SADD");
            check(r.sismember("j:s", "y") && !r.sismember("j:s", "w"), "SISMEMBER");
            Set<String> ms = r.smembers("j:s");
            check(ms.equals(Set.of("x", "y", "z")), "SMEMBERS " + ms);
            check(r.srem("j:s", "x") == 1 && r.scard("j:s") == 2, "SREM/SCARD");
            r.sadd("j:s2", "y", "q");
            check(r.sinter("j:s", "j:s2").equals(Set.of("y")), "SINTER");
            check(r.smove("j:s", "j:s2", "z") == 1 && r.scard("j:s2") == 3, "SMOVE");

            // Lists and a blocking pop, woken by a push from another client.
            check(r.rpush("j:l", "a", "b", "c") == 3 && r.lpush("j:l", "z") == 4, "RPUSH/LPUSH");
            check(r.lrange("j:l", 0, -1).equals(List.of("z", "a", "b", "c")), "LRANGE");
            check("z".equals(r.lpop("j:l")) && "c".equals(r.rpop("j:l")) && r.llen("j:l") == 2, "LPOP/RPOP/LLEN");
            check(r.blpop(1, "j:empty-or-not", "j:l").equals(List.of("j:l", "a")), "BLPOP of an element there");
            Thread pusher = new Thread(() -> {
                try (Jedis o = new Jedis("127.0.0.1", port)) {
                    for (int i = 0; i < 3000 && !o.info("clients").contains("blocked_clients:1"); i++) {
                        Thread.sleep(10);
                    }
                    o.rpush("j:q", "job");
                    for (int i = 0; i < 3000 && !o.info("clients").contains("blocked_clients:1"); i++) {
                        Thread.sleep(10);
                    }
                    o.zadd("j:bz", 7, "m");
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            pusher.start();
            check(r.brpop(30, "j:q").equals(List.of("j:q", "job")), "BRPOP woken by RPUSH");

            // Sorted sets, and a blocking pop woken by ZADD.
            var bz = r.bzpopmax(30, "j:bz");
            check(bz != null && "j:bz".equals(bz.getKey()) && "m".equals(bz.getValue().getElement()) && bz.getValue().getScore() == 7,
                    "BZPOPMAX woken by ZADD: " + bz);
            try {
                pusher.join();
            } catch (InterruptedException e) {
                throw new AssertionError(e);
            }
            check(r.zadd("j:z", Map.of("a", 1.0, "b", 2.5, "c", -1.0)) == 3 && r.zcard("j:z") == 3, "ZADD/ZCARD");
            check(r.zrange("j:z", 0, -1).equals(List.of("c", "a", "b")), "ZRANGE");
            check(r.zscore("j:z", "b") == 2.5 && r.zincrby("j:z", 2, "a") == 3.0 && r.zrank("j:z", "a") == 2, "ZSCORE/ZINCRBY/ZRANK");
            check(r.zrangeByScore("j:z", 0, Double.POSITIVE_INFINITY).equals(List.of("b", "a")), "ZRANGEBYSCORE");
            var low = r.zpopmin("j:z");
            check("c".equals(low.getElement()) && low.getScore() == -1, "ZPOPMIN " + low);
            check("zset".equals(r.type("j:z")), "TYPE zset");

            // Errors a client maps to exceptions.
            try {
                r.hget("j:n", "a");
                check(false, "HGET of a string did not fail");
            } catch (redis.clients.jedis.exceptions.JedisDataException e) {
                check(e.getMessage().startsWith("WRONGTYPE"), "WRONGTYPE: " + e.getMessage());
            }
            System.out.println("ok");
        } catch (Throwable e) {
            System.out.println("failed: " + e);
            System.exit(1);
        }
    }
}
