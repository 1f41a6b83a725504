"""The PostgreSQL front end (protocol: pgcore; catalog: catalog*.py)."""
