-- GC-Bench's PostgreSQL: Airflow's metadata database and GC-Bench's results database,
-- each with its own login role. Run once, as the server's superuser, by psql with:
--   -v airflow_db=airflow -v airflow_user=airflow -v airflow_password=...
--   -v results_db=gcbench -v results_user=gcbench -v results_password=...
-- (deploy/postgres/init-databases.sh does that from the environment at the server's
-- first start.)
--
-- What the results role may do: connect to the results database only, and create,
-- read and write in the schema `gcbench` it owns. It owns no database, cannot create
-- schemas, cannot create anything in `public`, and cannot connect to Airflow's
-- database. Airflow's role owns its database (Airflow creates its tables in `public`).
\set ON_ERROR_STOP on

CREATE ROLE :"airflow_user" LOGIN PASSWORD :'airflow_password';
CREATE ROLE :"results_user" LOGIN PASSWORD :'results_password'
    NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;

CREATE DATABASE :"airflow_db" OWNER :"airflow_user";
REVOKE ALL ON DATABASE :"airflow_db" FROM PUBLIC;
GRANT CONNECT, TEMPORARY ON DATABASE :"airflow_db" TO :"airflow_user";

-- owned by the superuser: owning the database would let the results role create schemas
CREATE DATABASE :"results_db";
REVOKE ALL ON DATABASE :"results_db" FROM PUBLIC;
GRANT CONNECT, TEMPORARY ON DATABASE :"results_db" TO :"results_user";

\connect :"results_db"
REVOKE ALL ON SCHEMA public FROM PUBLIC;
CREATE SCHEMA gcbench AUTHORIZATION :"results_user";
ALTER ROLE :"results_user" IN DATABASE :"results_db" SET search_path = gcbench;
