-- Version 3: nothing lost at ingestion.
--
-- clocks_event_reasons is NVML's clocks-event reasons bitmask, an *unsigned* 64-bit
-- integer (nvmlDeviceGetCurrentClocksEventReasons returns unsigned long long). As a
-- signed bigint it refused every mask with bit 63 set (0x8000000000000001), and COPY
-- dropped the whole sample, its power and energy with it. gcbench.uint64 holds every
-- value 0 .. 2^64 - 1 exactly; the check refuses NaN, infinities, fractions and
-- negatives (numeric would otherwise round 1.5 to 2). Values already stored as
-- negative bigints are read back as the two's-complement bits they were.
CREATE DOMAIN gcbench.uint64 AS numeric
    CHECK (VALUE >= 0 AND VALUE <= 18446744073709551615 AND scale(VALUE) = 0);

ALTER TABLE gcbench.samples ALTER COLUMN clocks_event_reasons TYPE gcbench.uint64
    USING (CASE WHEN clocks_event_reasons < 0 THEN clocks_event_reasons::numeric + 18446744073709551616
                ELSE clocks_event_reasons::numeric END);

-- What collect changed to store a trial (gcbench.store.sanitize): sample rows it could
-- not place, and one line per value stored as NULL or text repaired (NUL, invalid
-- UTF-8, cut to length).
ALTER TABLE gcbench.trials
    ADD COLUMN samples_dropped bigint NOT NULL DEFAULT 0,
    ADD COLUMN ingest_notes jsonb NOT NULL DEFAULT '[]'::jsonb;
