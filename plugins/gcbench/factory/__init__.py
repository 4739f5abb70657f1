"""DAG factory: plan -> Airflow DAG, and the local and docker trial runners."""
