"""GC-Bench: end-to-end energy benchmarks of GPU machine-learning work.

The package follows the data flow of a benchmark run:

    plan (YAML -> Plan) -> factory (Plan -> Airflow DAG) -> trial (one measured run)
    -> energy (NVML / nvidia-smi / RAPL / simulated) -> store (PostgreSQL)
    -> validate -> stats -> report

Heavy libraries (torch, docker, pandas, matplotlib) are imported lazily inside the
functions that need them, so that parsing plans in Airflow's DAG processor stays cheap.
"""

__version__ = "0.1.0"
