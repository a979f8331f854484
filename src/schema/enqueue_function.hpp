#pragma once
// Migration 16: {s}.enqueue(), the producer as a SQL function, for services in any language and
// for psql. It keeps the C++ producer's rules (src/producer/producer.cpp), checked against it by
// tests/integration/sql_enqueue_pgtest.cpp:
//   - one transaction with the caller's business change (the caller's own; in autocommit the call
//     is a transaction of its own);
//   - the aggregate's next sequence from the same counter row, locked until the transaction ends,
//     so writers of one aggregate (SQL or C++) commit in sequence order and a rollback leaves no
//     gap;
//   - the same checks, in the same order, with the same words (a name's value is not echoed: an
//     error goes to a terminal, and the name may hold what a terminal acts on);
//   - the same message size as the Kafka sink counts it (librdkafka's framing, the key, the payload
//     as jsonb prints it, every header), against the same default limit, 900 KiB, which the
//     session setting outbox.max_message_bytes changes (ProducerOptions::max_payload_bytes);
//   - a UUIDv7 id (its first 48 bits the Unix time in ms: resolve_commit and cleanup read it);
//   - synchronous_commit raised to on for the transaction when it was off (else a crash could lose
//     a commit the relay already published);
//   - the NOTIFY rule (wake relays only when every live one listens), decided at each call.
// Table-less events are not written by it: they need the C++ producer
// (ProducerOptions::table_less). SECURITY INVOKER: the caller's own privileges, the writer role's
// (roles.cpp grants EXECUTE to it and PUBLIC loses it). search_path is pinned: every name is
// schema-qualified or pg_catalog's.
//
// Formatted by fmt at migrate time ({s}, {channel}): braces of the SQL itself are doubled.

namespace outbox::detail {

inline constexpr const char* kEnqueueFunction = R"SQL(
-- One header as librdkafka counts it: name, value, and the zig-zag varint of each length.
CREATE FUNCTION {s}.outbox_kafka_header_bytes(name_bytes bigint, value_bytes bigint)
RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT name_bytes + value_bytes
         + (SELECT sum(CASE WHEN 2 * n < 128 THEN 1 WHEN 2 * n < 16384 THEN 2
                            WHEN 2 * n < 2097152 THEN 3 WHEN 2 * n < 268435456 THEN 4 ELSE 5 END)
            FROM (VALUES (name_bytes), (value_bytes)) AS l(n))::bigint
$fn$;

-- What terminals act on instead of showing: C0 and C1 controls, line and paragraph separators,
-- bidirectional controls (common/printable.cpp's is_hostile).
CREATE FUNCTION {s}.outbox_hostile_pattern() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
  SELECT E'[\\x01-\\x1f\\x7f-\\x9f\\u2028\\u2029\\u202a-\\u202e\\u2066-\\u2069]'
$fn$;

-- An aggregate type, aggregate id or event type: non-empty, at most 255 bytes, nothing a terminal
-- acts on (C0 and C1 controls, line and paragraph separators, bidirectional controls).
CREATE FUNCTION {s}.outbox_check_name(field text, value text)
RETURNS void LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  at integer;
  code integer;
  what text;
BEGIN
  IF value IS NULL OR value = '' THEN
    RAISE EXCEPTION 'outbox: % is empty; every event needs one', field USING ERRCODE = '22023';
  END IF;
  IF octet_length(value) > 255 THEN
    RAISE EXCEPTION 'outbox: % is % bytes; at most 255 are allowed', field, octet_length(value)
      USING ERRCODE = '22023';
  END IF;
  at := regexp_instr(value, {s}.outbox_hostile_pattern());
  IF at > 0 THEN
    code := ascii(substr(value, at, 1));
    what := CASE WHEN code <= 159 THEN 'the control character'
                 WHEN code IN (8232, 8233) THEN 'the line break'
                 ELSE 'the bidirectional control' END
            || ' U+' || lpad(upper(to_hex(code)), 4, '0');
    RAISE EXCEPTION 'outbox: % contains % at byte %, which terminals and log viewers act on instead of showing; use printable characters',
      field, what, octet_length(substr(value, 1, at - 1)) USING ERRCODE = '22023';
  END IF;
END
$fn$;

CREATE FUNCTION {s}.enqueue(
  aggregate_type text, aggregate_id text, event_type text, payload jsonb,
  headers jsonb DEFAULT NULL, schema_version integer DEFAULT 1,
  deliver_after interval DEFAULT NULL, INOUT event_id uuid DEFAULT NULL,
  traceparent text DEFAULT NULL, OUT aggregate_sequence bigint)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  own_headers jsonb := coalesce(enqueue.headers, '{{}}'::jsonb);
  delay interval := coalesce(enqueue.deliver_after, interval '0');
  available timestamptz := now() + coalesce(enqueue.deliver_after, interval '0');
  header record;
  header_bytes bigint := 0;
  message_bytes bigint;
  payload_bytes bigint;
  most bigint;
  id bytea;
BEGIN
  -- Sizes and characters are counted in UTF-8, as the C++ producer and the brokers count them.
  IF current_setting('server_encoding') <> 'UTF8' THEN
    RAISE EXCEPTION 'outbox: enqueue() needs a database in UTF8 (this one is %): names and sizes are counted in UTF-8; create the database with ENCODING ''UTF8''',
      current_setting('server_encoding') USING ERRCODE = '22023';
  END IF;
  IF enqueue.traceparent = '' THEN  -- as the C++ producer: empty is none
    enqueue.traceparent := NULL;
  END IF;
  PERFORM {s}.outbox_check_name('aggregate_type', enqueue.aggregate_type);
  PERFORM {s}.outbox_check_name('aggregate_id', enqueue.aggregate_id);
  PERFORM {s}.outbox_check_name('event_type', enqueue.event_type);
  IF enqueue.schema_version IS NULL OR enqueue.schema_version < 1 THEN
    RAISE EXCEPTION 'outbox: schema_version is %; it must be 1 or more',
      coalesce(enqueue.schema_version::text, 'NULL') USING ERRCODE = '22023';
  END IF;
  IF enqueue.payload IS NULL THEN
    RAISE EXCEPTION 'outbox: payload of % % is NULL; give a JSON document (''{{}}'' for an event without data)',
      enqueue.event_type, enqueue.aggregate_id USING ERRCODE = '22023';
  END IF;
  IF jsonb_typeof(own_headers) <> 'object' THEN
    RAISE EXCEPTION 'outbox: headers of % % must be a JSON object', enqueue.event_type,
      enqueue.aggregate_id USING ERRCODE = '22023';
  END IF;
  -- In the C++ producer's order (bytewise by key), so the first problem named is the same.
  FOR header IN SELECT h.key, h.value FROM jsonb_each(own_headers) AS h
                ORDER BY convert_to(h.key, 'UTF8') LOOP
    IF jsonb_typeof(header.value) <> 'string' THEN
      RAISE EXCEPTION 'outbox: headers of % % value of "%" must be a string', enqueue.event_type,
        enqueue.aggregate_id,
        CASE WHEN header.key ~ {s}.outbox_hostile_pattern() THEN '(a key with control characters)'
             ELSE header.key END
        USING ERRCODE = '22023';
    END IF;
    IF header.key = '' THEN
      RAISE EXCEPTION 'outbox: headers of % % has an empty key', enqueue.event_type,
        enqueue.aggregate_id USING ERRCODE = '22023';
    END IF;
    IF header.key IN ('event_id', 'event_type', 'aggregate_type', 'aggregate_sequence',
                      'schema_version') THEN
      RAISE EXCEPTION 'outbox: headers of % % uses the reserved name "%": outbox sets it from the event itself; choose another header name',
        enqueue.event_type, enqueue.aggregate_id, header.key USING ERRCODE = '22023';
    END IF;
    header_bytes := header_bytes + {s}.outbox_kafka_header_bytes(octet_length(header.key),
                                                                 octet_length(header.value #>> '{{}}'));
  END LOOP;
  IF enqueue.traceparent IS NOT NULL THEN
    IF enqueue.traceparent !~ '^[0-9a-f]{{2}}-[0-9a-f]{{32}}-[0-9a-f]{{16}}-[0-9a-f]{{2}}$'
       OR enqueue.traceparent LIKE 'ff-%'
       OR substr(enqueue.traceparent, 4, 32) = repeat('0', 32)
       OR substr(enqueue.traceparent, 37, 16) = repeat('0', 16) THEN
      RAISE EXCEPTION 'outbox: traceparent of % % is not valid; it must be a W3C trace context such as 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 (lower-case hex, ids not all zeros)',
        enqueue.event_type, enqueue.aggregate_id USING ERRCODE = '22023';
    END IF;
    IF own_headers ? 'traceparent' AND own_headers ->> 'traceparent' <> enqueue.traceparent THEN
      RAISE EXCEPTION 'outbox: % % has a traceparent and a different "traceparent" header; give one of them',
        enqueue.event_type, enqueue.aggregate_id USING ERRCODE = '22023';
    END IF;
    header_bytes := header_bytes + {s}.outbox_kafka_header_bytes(11, 55);
  END IF;
  -- outbox's own headers, as the Kafka sink sets them (the sequence at its longest, 19 digits)
  header_bytes := header_bytes
    + {s}.outbox_kafka_header_bytes(8, 36)
    + {s}.outbox_kafka_header_bytes(10, octet_length(enqueue.event_type))
    + {s}.outbox_kafka_header_bytes(14, octet_length(enqueue.aggregate_type))
    + {s}.outbox_kafka_header_bytes(18, 19)
    + {s}.outbox_kafka_header_bytes(14, length(enqueue.schema_version::text));
  payload_bytes := octet_length(enqueue.payload::text);
  message_bytes := 36 + octet_length(enqueue.aggregate_id) + payload_bytes + header_bytes;
  most := coalesce(nullif(current_setting('outbox.max_message_bytes', true), '')::bigint, 921600);
  IF message_bytes > most THEN
    RAISE EXCEPTION 'outbox: % % would be a message of % bytes: payload % bytes as PostgreSQL''s jsonb prints it, headers %, key %, Kafka''s framing 36; the limit is % (the setting outbox.max_message_bytes). Store large documents elsewhere and send a reference',
      enqueue.event_type, enqueue.aggregate_id, message_bytes, payload_bytes, header_bytes,
      octet_length(enqueue.aggregate_id), most USING ERRCODE = '22023';
  END IF;
  IF enqueue.event_id = '00000000-0000-0000-0000-000000000000' THEN
    RAISE EXCEPTION 'outbox: event_id is the nil UUID; leave it unset to get a fresh UUIDv7'
      USING ERRCODE = '22023';
  END IF;
  -- On the calendar (a month is not 30 days): what available_at will be.
  IF available < now() OR available > now() + interval '8760 hours' THEN
    RAISE EXCEPTION 'outbox: deliver_after of % % is %; it must be from 0 to 365 days',
      enqueue.event_type, enqueue.aggregate_id, delay USING ERRCODE = '22023';
  END IF;
  IF enqueue.traceparent IS NOT NULL THEN
    own_headers := own_headers || jsonb_build_object('traceparent', enqueue.traceparent);
  END IF;

  IF current_setting('synchronous_commit') = 'off' THEN
    PERFORM set_config('synchronous_commit', 'on', true);
  END IF;
  -- As the C++ producer's statement: decided at each call, recorded for the table's trigger.
  PERFORM set_config('outbox.wake_checked', '{channel}', true);
  IF (SELECT bool_and(r.listening) FROM {s}.outbox_relays r
      WHERE r.seen_at > statement_timestamp() - interval '30 seconds') THEN
    PERFORM pg_notify('{channel}', '');
  END IF;

  IF enqueue.event_id IS NULL THEN
    -- UUIDv7: 48 bits of Unix time in ms, the version, then random bits (and the variant).
    id := uuid_send(gen_random_uuid());
    id := overlay(id PLACING substr(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint), 3, 6)
                  FROM 1 FOR 6);
    id := set_byte(id, 6, (get_byte(id, 6) & 15) | 112);
    enqueue.event_id := encode(id, 'hex')::uuid;
  END IF;
  INSERT INTO {s}.outbox_aggregate_sequences AS s (aggregate_type, aggregate_id, last_sequence)
  VALUES (enqueue.aggregate_type, enqueue.aggregate_id, 1)
  ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = s.last_sequence + 1
  RETURNING s.last_sequence INTO enqueue.aggregate_sequence;
  INSERT INTO {s}.outbox_events (event_id, aggregate_type, aggregate_id, aggregate_sequence,
                                 event_type, schema_version, payload, headers, available_at)
  VALUES (enqueue.event_id, enqueue.aggregate_type, enqueue.aggregate_id,
          enqueue.aggregate_sequence, enqueue.event_type, enqueue.schema_version, enqueue.payload,
          own_headers, available);
END
$fn$;
REVOKE EXECUTE ON FUNCTION {s}.enqueue(text, text, text, jsonb, jsonb, integer, interval, uuid, text)
  FROM PUBLIC;
)SQL";

}  // namespace outbox::detail
