# changelake with Spark and s3fs: the image docker-compose.yml runs as the Spark master, the
# Spark worker and the CDC pipeline (the same Python and pyspark everywhere, as Spark requires).
FROM python:3.11-slim-bookworm

# Spark 4 needs Java 17 or 21 with jdk.incubator.vector (Debian's JRE has it); procps gives
# Spark's launch scripts `ps`.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/changelake
COPY pyproject.toml README.md ./
COPY src ./src
COPY examples ./examples
RUN pip install --no-cache-dir ".[spark,s3]"

# spark-class (master, worker) and spark-submit come with pyspark.
ENV SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=python3 \
    PYTHONUNBUFFERED=1
ENV PATH=$SPARK_HOME/bin:$SPARK_HOME/sbin:$PATH
