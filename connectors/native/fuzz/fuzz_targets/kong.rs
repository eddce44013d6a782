#![no_main]

libfuzzer_sys::fuzz_target!(|body: &[u8]| anchorwatch_ingest_native_fuzz::kong(body));
