"""A real single-node Kafka broker (KRaft: one process is broker and controller) for the
Kafka -> Delta example and its tests. Standard library only, so `dev/kafka` runs it with any
Python 3.

Apache Kafka's own server jars (``org.apache.kafka:kafka_2.13`` and its runtime dependencies)
are fetched once by Maven's dependency plugin from a generated pom into ``build/kafka/``; the
broker runs as ``java -cp ... kafka.Kafka server.properties`` after its storage was formatted
by Kafka's own ``kafka.tools.StorageTool``. It listens on 127.0.0.1 only, on free ports; its
data lives in a temporary directory that ``stop()`` removes. A state file (``broker.json`` in
the state directory) records pid, ports and data directory, so ``dev/kafka stop|status`` and
tests find a broker started elsewhere.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import List, Optional

REPO = Path(__file__).resolve().parents[1]
KAFKA_VERSION = "4.1.1"
LOG4J_VERSION = "2.24.3"  # the log4j-core that kafka_2.13 4.1.1 depends on
DEFAULT_STATE_DIR = REPO / "build" / "kafka" / "state"
STARTED_LINE = "Kafka Server started"

POM = f"""<project>
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.keyed-watermarks</groupId><artifactId>kafka-broker</artifactId><version>0</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{KAFKA_VERSION}</version></dependency>
    <!-- Kafka logs through slf4j 1.7; this binds it to the log4j-core Kafka already brings. -->
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId>
      <version>{LOG4J_VERSION}</version></dependency>
  </dependencies>
</project>
"""

LOG4J2 = """status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = org.apache.kafka
logger.kafka.level = WARN
logger.server.name = kafka.server
logger.server.level = INFO
"""


class BrokerError(RuntimeError):
    pass


def lib_dir() -> Path:
    return REPO / "build" / "kafka" / f"lib-{KAFKA_VERSION}"


def ensure_jars() -> Path:
    """Kafka's server jars, fetched once (Maven's own cache, then ``build/kafka/lib-<v>``)."""
    lib = lib_dir()
    if (lib / f"kafka_2.13-{KAFKA_VERSION}.jar").exists():
        return lib
    work = REPO / "build" / "kafka"
    work.mkdir(parents=True, exist_ok=True)
    (work / "pom.xml").write_text(POM)
    tmp = Path(tempfile.mkdtemp(prefix="lib-", dir=work))
    cmd = ["mvn", "-q", "-B", "-f", str(work / "pom.xml"),
           "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies",
           "-DincludeScope=runtime", f"-DoutputDirectory={tmp}"]
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise BrokerError(f"fetching Kafka {KAFKA_VERSION} with Maven failed:\n{result.stdout}")
    shutil.rmtree(lib, ignore_errors=True)
    tmp.rename(lib)  # complete or absent: an interrupted fetch is retried
    return lib


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Broker:
    """A running (or stopped) broker; ``bootstrap`` is what clients connect to."""

    state_dir: str
    data_dir: str
    port: int
    controller_port: int
    pid: Optional[int] = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return Path(self.data_dir) / "logs" / "server.log"

    def save(self) -> None:
        Path(self.state_dir).mkdir(parents=True, exist_ok=True)
        state_file(self.state_dir).write_text(json.dumps(asdict(self), indent=2) + "\n")

    def alive(self) -> bool:
        if self.pid is None:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        # A zombie child (started by this process, exited, not reaped) is not alive.
        try:
            return Path(f"/proc/{self.pid}/stat").read_text().split()[2] != "Z"
        except OSError:
            return True

    def accepting(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    # -- lifecycle ---------------------------------------------------------------------------

    def _java(self, main: str, *args: str) -> List[str]:
        return ["java", "-Xms128m", "-Xmx512m", "-XX:+UseG1GC",
                f"-Dkafka.logs.dir={Path(self.data_dir) / 'logs'}",
                f"-Dlog4j2.configurationFile={Path(self.data_dir) / 'log4j2.properties'}",
                "-cp", str(lib_dir() / "*"), main, *args]

    def _write_config(self) -> Path:
        data = Path(self.data_dir)
        (data / "logs").mkdir(parents=True, exist_ok=True)
        (data / "log4j2.properties").write_text(LOG4J2)
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(data / "kraft-logs"),
            "num.partitions": "4",
            "auto.create.topics.enable": "false",  # topics are created on purpose, with partitions
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # Small segments and no retention by time: tests read everything back.
            "log.retention.hours": "-1",
            "log.segment.bytes": str(16 * 1024 * 1024),
        }
        path = data / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return path

    def format_storage(self) -> None:
        config = self._write_config()
        cluster_id = subprocess.run(self._java("kafka.tools.StorageTool", "random-uuid"),
                                    check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
        result = subprocess.run(
            self._java("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(config)),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0:
            raise BrokerError(f"kafka-storage format failed:\n{result.stdout}")

    def launch(self, timeout_s: float = 120.0) -> "Broker":
        """Starts the broker process on the formatted data directory (again after ``halt``)."""
        if self.alive():
            raise BrokerError(f"broker already running (pid {self.pid})")
        config = Path(self.data_dir) / "server.properties"
        started_before = self._started_lines()
        out = open(Path(self.data_dir) / "logs" / "stdout.log", "ab")
        # Own session: stop() signals the whole group, and the broker outlives `dev/kafka start`.
        proc = subprocess.Popen(self._java("kafka.Kafka", str(config)), stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=self.data_dir)
        out.close()
        self.pid = proc.pid
        self.save()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise BrokerError(f"broker exited with {proc.returncode}; see {self.log_file} "
                                  f"and {Path(self.data_dir) / 'logs' / 'stdout.log'}")
            if self._started_lines() > started_before and self.accepting():
                return self
            time.sleep(0.2)
        self.halt()
        raise BrokerError(f"broker not started after {timeout_s:.0f} s; see {self.log_file}")

    def _started_lines(self) -> int:
        try:
            return self.log_file.read_text(errors="replace").count(STARTED_LINE)
        except FileNotFoundError:
            return 0

    def halt(self, sig: int = signal.SIGTERM, timeout_s: float = 60.0) -> None:
        """Stops the process (SIGTERM: a controlled shutdown), keeping the data."""
        if self.pid is None:
            return
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + timeout_s
        while self.alive() and time.monotonic() < deadline:
            _reap(self.pid)
            time.sleep(0.1)
        if self.alive():
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            while self.alive():
                _reap(self.pid)
                time.sleep(0.1)
        _reap(self.pid)
        self.pid = None
        self.save()

    def stop(self) -> None:
        """Stops the broker and removes its data and state file."""
        self.halt()
        shutil.rmtree(self.data_dir, ignore_errors=True)
        state_file(self.state_dir).unlink(missing_ok=True)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def state_file(state_dir) -> Path:
    return Path(state_dir) / "broker.json"


def load(state_dir=DEFAULT_STATE_DIR) -> Optional[Broker]:
    path = state_file(state_dir)
    if not path.exists():
        return None
    return Broker(**json.loads(path.read_text()))


def start(state_dir=DEFAULT_STATE_DIR) -> Broker:
    """Starts a fresh broker (new temporary data directory, free ports) and records it."""
    existing = load(state_dir)
    if existing is not None and existing.alive():
        raise BrokerError(f"a broker is already running at {existing.bootstrap} "
                          f"(pid {existing.pid}); `dev/kafka stop` first")
    if existing is not None:
        existing.stop()  # a stale record: clean what it left
    ensure_jars()
    broker = Broker(state_dir=str(state_dir), data_dir=tempfile.mkdtemp(prefix="kw-kafka-"),
                    port=free_port(), controller_port=free_port())
    try:
        broker.format_storage()
        return broker.launch()
    except BaseException:
        broker.stop()
        raise


def main(argv: List[str]) -> int:
    usage = "usage: dev/kafka start|stop|status|bootstrap"
    if len(argv) != 1:
        print(usage, file=sys.stderr)
        return 2
    cmd = argv[0]
    broker = load()
    if cmd == "start":
        b = start()
        print(f"Kafka {KAFKA_VERSION} broker running at {b.bootstrap} (pid {b.pid}, data in "
              f"{b.data_dir}); stop it with dev/kafka stop")
        return 0
    if cmd == "stop":
        if broker is None:
            print("no broker recorded")
            return 0
        broker.stop()
        print("broker stopped, data removed")
        return 0
    if cmd == "status":
        if broker is None or not broker.alive():
            print("not running")
            return 1
        print(f"running at {broker.bootstrap} (pid {broker.pid}, data in {broker.data_dir})")
        return 0
    if cmd == "bootstrap":  # for scripts: BOOTSTRAP=$(dev/kafka bootstrap)
        if broker is None or not broker.alive():
            print("no broker running: dev/kafka start", file=sys.stderr)
            return 1
        print(broker.bootstrap)
        return 0
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
