"""PostgreSQL store: schema migrations, COPY ingestion, queries for reports."""
