"""A SparkSession for running on this machine: loopback only, no UI, quiet logs.

For examples, tests and benchmarks. Under ``spark-submit`` against a
cluster, build the session the usual way (``SparkSession.builder.getOrCreate()``)
and let spark-submit's ``--master`` and ``--conf`` decide.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: log4j2 configuration that keeps Spark's JVM to errors only, on stderr.
QUIET_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
# The shell's level equal to the root's: Spark then does not announce it.
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
"""

LOOPBACK = "127.0.0.1"


def running_under_spark_submit() -> bool:
    """True when spark-submit started this Python process (it passes the gateway port)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def local_session(
    app_name: str = "django-eventmq",
    master: str = "local[*]",
    *,
    conf: Mapping[str, str] | None = None,
    python_path: Sequence[str | Path] = (),
    quiet: bool = True,
) -> SparkSession:
    """Start (or get) a SparkSession bound to 127.0.0.1 with the UI and progress bar off.

    The Python workers run this interpreter; ``python_path`` entries are put
    on their ``PYTHONPATH`` (a checkout that is not installed, for example).
    ``master`` may be ``local[N,F]``: N threads, F attempts per task.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    if python_path:
        # The JVM is started from this environment and passes PYTHONPATH on
        # to the Python workers it starts.
        paths = [str(p) for p in python_path]
        current = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join([*paths, *([current] if current else [])])
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": LOOPBACK,
        "spark.driver.bindAddress": LOOPBACK,
    }
    if quiet and "SPARK_CONF_DIR" not in os.environ:
        # The driver JVM reads log4j2.properties from the configuration
        # directory when it starts, before any SparkConf is looked at.
        os.environ["SPARK_CONF_DIR"] = str(_quiet_conf_dir())
    settings.update(conf or {})
    builder = SparkSession.builder.master(master).appName(app_name)
    for name, value in settings.items():
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    if quiet:
        spark.sparkContext.setLogLevel("ERROR")
    return spark


def _quiet_conf_dir() -> Path:
    """A Spark configuration directory holding only the quiet log4j2.properties."""
    directory = Path(tempfile.gettempdir()) / "django-eventmq-spark-conf"
    directory.mkdir(exist_ok=True)
    path = directory / "log4j2.properties"
    if not path.exists() or path.read_text() != QUIET_LOG4J2:
        path.write_text(QUIET_LOG4J2)
    return directory
