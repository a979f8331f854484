# The fuzz targets (tests/fuzz/<name>_fuzz.cpp, seeds in tests/fuzz/corpus/<name>/), shared by
# tests/fuzz/CMakeLists.txt and the g++ build's fuzz tests (tests/CMakeLists.txt).
set(OUTBOX_FUZZ_TARGETS jsonb_scan printable schema_name topic duration pgoutput
    table_less_message http_parts)
# Seconds each target runs as a test: 6 x 20 s keeps `make test`'s fuzzing at about two minutes.
set(OUTBOX_FUZZ_SECONDS 10 CACHE STRING "seconds each fuzz target runs as a test")
