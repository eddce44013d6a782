//! A Kong entry's request latency: `latencies.request`, Kong's own measurement in integer
//! milliseconds, as `kong._latency_of` reads it. Absent (or null, or no `latencies` at all):
//! unknown. Anything else that is not an integer is `Doubtful`: the reference path
//! dead-letters the entry naming the field. An integer out of the contract's range is the
//! event's check to refuse (`snapshot::Event::valid`).

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::read::{Text, Unused};

/// The latency as found.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Latency {
    Absent,
    Ms(i64),
    Doubtful,
}

/// The `latencies` member of an entry: an object holding `request`, or null.
pub(crate) struct Latencies;

/// The `request` member of `latencies`.
struct Request;

impl<'de> DeserializeSeed<'de> for Latencies {
    type Value = Latency;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> DeserializeSeed<'de> for Request {
    type Value = Latency;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

/// Whatever value is not what the reader looks for: read as strictly as orjson reads it,
/// and Doubtful.
macro_rules! doubtful_otherwise {
    () => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Latency, E> {
            Ok(Latency::Doubtful)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Latency, E> {
            Ok(Latency::Doubtful)
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Latency, E> {
            Ok(Latency::Doubtful)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Latency, A::Error> {
            while seq.next_element::<Unused>()?.is_some() {}
            Ok(Latency::Doubtful)
        }
    };
}

impl<'de> Visitor<'de> for Latencies {
    type Value = Latency;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("Kong's latencies")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Latency, E> {
        Ok(Latency::Absent)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Latency, E> {
        Ok(Latency::Doubtful)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Latency, E> {
        Ok(Latency::Doubtful)
    }
    doubtful_otherwise!();
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Latency, A::Error> {
        let (mut found, mut seen) = (Latency::Absent, false);
        while let Some(Text(key)) = map.next_key()? {
            if key == "request" {
                // Which of two Python keeps is the reference path's to say.
                found = if seen {
                    map.next_value::<Unused>()?;
                    Latency::Doubtful
                } else {
                    map.next_value_seed(Request)?
                };
                seen = true;
            } else {
                map.next_value::<Unused>()?;
            }
        }
        Ok(found)
    }
}

impl<'de> Visitor<'de> for Request {
    type Value = Latency;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a latency in milliseconds")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Latency, E> {
        Ok(Latency::Absent)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Latency, E> {
        Ok(Latency::Ms(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Latency, E> {
        Ok(i64::try_from(v).map_or(Latency::Doubtful, Latency::Ms))
    }
    doubtful_otherwise!();
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Latency, A::Error> {
        while map.next_entry::<Unused, Unused>()?.is_some() {}
        Ok(Latency::Doubtful)
    }
}
