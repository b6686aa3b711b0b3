"""Conformance of role partitioning with Kafka's own Java code (docs/design.md#topic-and-partition).

`tests/unit/conformance/Murmur2Dump.java` runs `Utils.murmur2`, `Utils.toPositive` and
the producer's `BuiltInPartitioner.partitionForKey` from the kafka-clients jar the
local broker uses (`.cache/kafka/4.4.0/jars`, fetched by deploy/kafka/fetch-jars.sh
when missing). No broker is needed; java and javac are.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from krabka.format.partition import murmur2, role_partition, to_positive

REPO = Path(__file__).resolve().parents[2]
JARS = REPO / ".cache" / "kafka" / "4.4.0" / "jars"
FETCH = REPO / "deploy" / "kafka" / "fetch-jars.sh"
SOURCE = Path(__file__).resolve().parent / "conformance" / "Murmur2Dump.java"
PARTITION_COUNTS = (1, 3, 16, 50)
SEED = 20_240_607
MAX_ROLE_BYTES = 32_767

# Kafka's UtilsTest.testMurmur2 vectors: input bytes -> Java signed int.
KAFKA_VECTORS = [
    (b"21", -973_932_308),
    (b"foobar", -790_332_482),
    (b"a-little-bit-long-string", -985_981_536),
    (b"a-little-bit-longer-string", -1_486_304_829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58_897_971),
    (bytes([ord("a"), ord("b"), ord("c")]), 479_470_107),
]


@dataclass(frozen=True)
class JavaRow:
    murmur2: int
    positive: int
    partitions: tuple[int, ...]  # one per PARTITION_COUNTS


JavaDump = Callable[[list[bytes]], list[JavaRow]]


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found: install a JDK 17+ (the local Kafka broker needs it too)")
    return path


def _jars() -> Path:
    if not (JARS / ".complete").exists():
        subprocess.run(["bash", str(FETCH)], check=True, timeout=600)
    assert list(JARS.glob("kafka-clients-*.jar")), f"no kafka-clients jar in {JARS}"
    return JARS


@pytest.fixture(scope="module")
def java_dump(tmp_path_factory: pytest.TempPathFactory) -> JavaDump:
    """Compile Murmur2Dump once; return a function that runs it over byte strings."""
    out = tmp_path_factory.mktemp("murmur2dump")
    classpath = f"{_jars()}/*"
    subprocess.run(
        [_tool("javac"), "-cp", classpath, "-d", str(out), str(SOURCE)],
        check=True,
        timeout=120,
    )
    java = _tool("java")

    def dump(keys: list[bytes]) -> list[JavaRow]:
        done = subprocess.run(
            [java, "-cp", f"{out}:{classpath}", "Murmur2Dump", *map(str, PARTITION_COUNTS)],
            input="".join(key.hex() + "\n" for key in keys),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        rows = [line.split() for line in done.stdout.splitlines() if line.startswith("M ")]
        assert [bytes.fromhex(row[1]) for row in rows] == keys, "Java output out of step"
        return [JavaRow(int(r[2]), int(r[3]), tuple(int(p) for p in r[4:])) for r in rows]

    return dump


def _random_text(rng: random.Random, alphabet: list[tuple[int, int]], length: int) -> str:
    chars = []
    for _ in range(length):
        low, high = rng.choice(alphabet)
        chars.append(chr(rng.randint(low, high)))
    return "".join(chars)


ASCII = [(0x21, 0x7E)]
ACCENTED = [(0xC0, 0xFF), (0x100, 0x17F)]  # Latin-1 supplement, Latin Extended-A
CJK = [(0x4E00, 0x9FFF), (0x3040, 0x30FF)]  # ideographs, kana
EMOJI = [(0x1F300, 0x1F5FF), (0x1F600, 0x1F64F), (0x1F900, 0x1F9FF)]  # 4 UTF-8 bytes
OTHER = [(0x0400, 0x04FF), (0x0590, 0x06FF), (0x0300, 0x036F), (0x0E00, 0x0E7F)]
SCRIPTS = [ASCII, ACCENTED, CJK, EMOJI, OTHER, ASCII + ACCENTED + CJK + EMOJI + OTHER]


def _truncate_utf8(text: str, limit: int) -> str:
    return text.encode("utf-8")[:limit].decode("utf-8", errors="ignore")


def role_names() -> list[str]:
    """Several thousand non-empty role names, the same on every run."""
    rng = random.Random(SEED)
    names = ["21", "foobar", "abc", "a", "é", "漢", "🦀", "leader", "orders-compactor"]
    names += [f"service-{i}" for i in range(500)]  # realistic, sequential names
    for length in range(1, 17):  # every length mod 4, in bytes too
        names += [_random_text(rng, script, length) for script in SCRIPTS for _ in range(10)]
    names += [_random_text(rng, rng.choice(SCRIPTS), rng.randint(1, 64)) for _ in range(3000)]
    names += [_random_text(rng, rng.choice(SCRIPTS), rng.randint(200, 3000)) for _ in range(40)]
    names += [
        _truncate_utf8(_random_text(rng, script, MAX_ROLE_BYTES), MAX_ROLE_BYTES)
        for script in SCRIPTS
    ]
    names += ["x" * MAX_ROLE_BYTES, "role with spaces", "tab\there", "slash/role:1"]
    assert all(names), "roles are non-empty"
    assert all(len(n.encode("utf-8")) <= MAX_ROLE_BYTES for n in names)
    return names


def test_kafka_utils_test_vectors_in_python() -> None:
    for data, expected in KAFKA_VECTORS:
        assert murmur2(data) == expected, data
        assert to_positive(expected) == expected & 0x7FFFFFFF


def test_kafka_utils_test_vectors_in_java(java_dump: JavaDump) -> None:
    rows = java_dump([data for data, _ in KAFKA_VECTORS])
    assert [row.murmur2 for row in rows] == [expected for _, expected in KAFKA_VECTORS]


def test_role_partitions_match_kafka_java(java_dump: JavaDump) -> None:
    names = role_names()
    assert len(names) > 4000
    assert any(len(n.encode()) != len(n) for n in names), "non-ASCII names included"
    rows = java_dump([name.encode("utf-8") for name in names])
    mismatches = []
    for name, row in zip(names, rows, strict=True):
        key = name.encode("utf-8")
        ours = (
            murmur2(key),
            to_positive(row.murmur2),
            tuple(role_partition(name, count) for count in PARTITION_COUNTS),
        )
        if ours != (row.murmur2, row.positive, row.partitions):
            mismatches.append(f"{name[:40]!r}: python {ours} java {row}")
    assert not mismatches, f"{len(mismatches)} differences, e.g.:\n" + "\n".join(mismatches[:10])
    negatives = sum(row.murmur2 < 0 for row in rows)
    assert negatives > len(rows) // 4, "the sign bit must be exercised"
    for index, count in enumerate(PARTITION_COUNTS):
        used = {row.partitions[index] for row in rows}
        assert used == set(range(count)), f"every one of {count} partitions is hit"
