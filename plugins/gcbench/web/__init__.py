"""The web app: report pages served by FastAPI (:mod:`.app`), mounted in Airflow's API server by
the Airflow plugin (:mod:`.airflow_plugin`)."""
