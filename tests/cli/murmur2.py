"""Kafka's partitioner, written here from its definition rather than taken from outbox: murmur2
(Kafka's seed 0x9747b28c) of a key's UTF-8 bytes, made positive (& 0x7fffffff, Kafka's
toPositive) and taken modulo the partition count. The interop tests (nats_interop.sh,
rabbitmq_interop.sh, redis_interop.sh) check the {partition} of a subject, routing key or stream
name against it.

Usage, from a test under lib.sh: PYTHONPATH="$cli_dir" python3 - <<'PY' ... from murmur2 import
partition ... PY
"""


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of `data`, as an unsigned 32-bit integer."""
    m, h = 0x5bd1e995, (0x9747b28c ^ len(data)) & 0xffffffff
    for i in range(0, len(data) - len(data) % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xffffffff
        k ^= k >> 24
        k = (k * m) & 0xffffffff
        h = (h * m) & 0xffffffff
        h ^= k
    tail = len(data) % 4
    base = len(data) - tail
    if tail >= 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & 0xffffffff
    h ^= h >> 13
    h = (h * m) & 0xffffffff
    h ^= h >> 15
    return h


def partition(key: str, partitions: int) -> int:
    """The partition of `partitions` Kafka's default partitioner gives `key`."""
    return (murmur2(key.encode("utf-8")) & 0x7fffffff) % partitions


if __name__ == "__main__":
    # Known values of Kafka's Utils.murmur2 (its UtilsTest), as signed 32-bit integers.
    for text, want in [("21", -973932308), ("foobar", -790332482), ("a-little-bit-long-string",
                       -985981536), ("a-little-bit-longer-string", -1486304829),
                       ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
                       ("abc", 479470107)]:
        got = murmur2(text.encode())
        got = got - (1 << 32) if got >= 1 << 31 else got
        assert got == want, (text, got, want)
    print("murmur2: ok")
