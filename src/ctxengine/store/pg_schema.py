"""The PostgreSQL schema of ``PostgresStore``, as a numbered list of migrations.

``migrate`` applies, in one transaction under an advisory lock (two processes starting at once
apply each migration once), every migration whose number the table ``ctx_migrations`` does not
hold yet, and records it there. A migration is never edited once released: a change of schema is
a new migration at the end of ``MIGRATIONS``.

Tables: ``ctx_entries`` (append-only, ``(session, seq)`` unique), ``ctx_blobs`` (artifact content
by its BLAKE2b hash, stored once) and ``ctx_artifacts`` (a session's artifact ids pointing at
blobs), ``ctx_fences`` (the highest fencing number each session's lock has handed out: a writer
holding a lower one is refused), and the proxy's conversation index: ``ctx_proxy_sessions`` (one
row a session: its key digest, never a key; its figures), ``ctx_proxy_links`` (chain link ->
session, the primary key is the lookup) and ``ctx_proxy_turns`` (what each request did to the
engine, so that any node can rebuild it), ``ctx_proxy_jobs`` (the background jobs: their input,
outcome, and the turn that applied it: ``proxy.job_index``).
"""

from __future__ import annotations

import psycopg

MIGRATION_LOCK = 0x637478656E67  # pg_advisory_xact_lock key ("ctxeng")

MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
        CREATE TABLE ctx_entries (
            session text NOT NULL, seq bigint NOT NULL, kind text NOT NULL, payload bytea NOT NULL,
            PRIMARY KEY (session, seq)
        );
        CREATE TABLE ctx_blobs (hash bytea PRIMARY KEY, content text NOT NULL);
        CREATE TABLE ctx_artifacts (
            session text NOT NULL, id text NOT NULL, hash bytea NOT NULL REFERENCES ctx_blobs (hash),
            meta bytea NOT NULL, ord bigserial NOT NULL,
            PRIMARY KEY (session, id)
        );
        CREATE TABLE ctx_fences (session text PRIMARY KEY, fence bigint NOT NULL);
        """,
    ),
    (
        2,
        """
        CREATE TABLE ctx_proxy_sessions (
            id text PRIMARY KEY, key_digest text NOT NULL, provider text NOT NULL, model text NOT NULL,
            branch_of text, name text, window_tokens integer NOT NULL,
            messages integer NOT NULL DEFAULT 0, turns integer NOT NULL DEFAULT 0, last_link bytea,
            dropped boolean NOT NULL DEFAULT false, created timestamptz NOT NULL DEFAULT now(),
            calls bigint NOT NULL DEFAULT 0, client_tokens bigint NOT NULL DEFAULT 0,
            upstream_tokens bigint NOT NULL DEFAULT 0, reported_input_tokens bigint NOT NULL DEFAULT 0,
            cache_read_tokens bigint NOT NULL DEFAULT 0, cache_write_tokens bigint NOT NULL DEFAULT 0,
            output_tokens bigint NOT NULL DEFAULT 0, compactions bigint NOT NULL DEFAULT 0,
            offloads bigint NOT NULL DEFAULT 0, cost_saved_usd double precision NOT NULL DEFAULT 0,
            upstream_errors bigint NOT NULL DEFAULT 0, replies_replaced bigint NOT NULL DEFAULT 0,
            retrieve_calls bigint NOT NULL DEFAULT 0
        );
        CREATE INDEX ctx_proxy_sessions_key ON ctx_proxy_sessions (key_digest);
        CREATE INDEX ctx_proxy_sessions_name ON ctx_proxy_sessions (key_digest, name)
            WHERE name IS NOT NULL AND NOT dropped;
        CREATE TABLE ctx_proxy_links (
            link bytea PRIMARY KEY, session text NOT NULL REFERENCES ctx_proxy_sessions (id),
            pos integer NOT NULL
        );
        CREATE TABLE ctx_proxy_turns (
            session text NOT NULL REFERENCES ctx_proxy_sessions (id), turn integer NOT NULL,
            messages integer NOT NULL, budget integer, at double precision NOT NULL,
            status integer, usage bytea,
            PRIMARY KEY (session, turn)
        );
        """,
    ),
    (
        3,
        """
        CREATE TABLE ctx_proxy_jobs (
            session text NOT NULL REFERENCES ctx_proxy_sessions (id), turn integer NOT NULL,
            kind text NOT NULL, input bytea NOT NULL, input_bytes integer NOT NULL,
            created double precision NOT NULL,
            status text NOT NULL DEFAULT 'queued', outcome bytea, ran_by text,
            finished double precision, applied_turn integer,
            PRIMARY KEY (session, turn, kind)
        );
        CREATE INDEX ctx_proxy_jobs_applied ON ctx_proxy_jobs (session, applied_turn)
            WHERE applied_turn IS NOT NULL;
        """,
    ),
    (
        4,
        """
        ALTER TABLE ctx_proxy_turns ADD COLUMN realigned integer;
        CREATE INDEX ctx_proxy_links_session ON ctx_proxy_links (session, pos);
        """,
    ),
    (
        5,
        """
        ALTER TABLE ctx_proxy_sessions ADD COLUMN digests bytea;
        """,
    ),
    (
        6,
        # The large values (messages, offloaded results, notes job inputs, client digests) are
        # compressed with lz4 instead of pglz: the server spent ~16 ms of CPU writing a
        # 150,000-token history with pglz, ~3.5 ms with lz4 (rows written from then on). A server
        # built without lz4 keeps pglz and says so (a WARNING to the client, in its log).
        """
        DO $$
        BEGIN
            ALTER TABLE ctx_entries ALTER COLUMN payload SET COMPRESSION lz4;
            ALTER TABLE ctx_blobs ALTER COLUMN content SET COMPRESSION lz4;
            ALTER TABLE ctx_proxy_jobs ALTER COLUMN input SET COMPRESSION lz4;
            ALTER TABLE ctx_proxy_jobs ALTER COLUMN outcome SET COMPRESSION lz4;
            ALTER TABLE ctx_proxy_sessions ALTER COLUMN digests SET COMPRESSION lz4;
        EXCEPTION WHEN feature_not_supported THEN
            RAISE WARNING 'ctxengine: this PostgreSQL has no lz4 (%); large values stay pglz', SQLERRM;
        END
        $$;
        """,
    ),
)


def migrate(conn: psycopg.Connection[tuple[object, ...]]) -> list[int]:
    """Bring the schema of ``conn``'s database (its ``search_path``) up to date.

    Returns:
        The numbers of the migrations applied now (empty when it was up to date).

    Raises:
        psycopg.Error: when a migration fails (none of this call's is then recorded).
    """
    applied: list[int] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS ctx_migrations "
            "(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {int(str(r[0])) for r in conn.execute("SELECT version FROM ctx_migrations")}
        for version, sql in MIGRATIONS:
            if version in done:
                continue
            conn.execute(sql.encode())
            conn.execute("INSERT INTO ctx_migrations (version) VALUES (%s)", (version,))
            applied.append(version)
    return applied
