//! Reading JSON as strictly as orjson reads it: the readers of the values the fast path
//! uses (a string, an anchor object) and of those it skips, plus the helpers every
//! hand-written object reader (here, in `kong` and in `ndjson`) fills its fields with.
//!
//! serde's derived readers skip unknown keys with `IgnoredAny`, for which serde_json checks
//! only the syntax; orjson also refuses numbers beyond the float range and lone surrogate
//! escapes there. So every reader here is written out, and skips with `Unused`, which reads
//! such values in full.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::snapshot::Anchor;

/// A value the fast path does not use, read as strictly as orjson reads it.
pub(crate) struct Unused;

impl<'de> Deserialize<'de> for Unused {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct UnusedVisitor;
        impl<'de> Visitor<'de> for UnusedVisitor {
            type Value = Unused;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Unused, E> {
                Ok(Unused)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Unused, E> {
                Ok(Unused)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Unused, E> {
                Ok(Unused)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Unused, E> {
                Ok(Unused)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Unused, E> {
                Ok(Unused)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Unused, E> {
                Ok(Unused)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Unused, A::Error> {
                while seq.next_element::<Unused>()?.is_some() {}
                Ok(Unused)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Unused, A::Error> {
                while map.next_entry::<Unused, Unused>()?.is_some() {}
                Ok(Unused)
            }
        }
        deserializer.deserialize_any(UnusedVisitor)
    }
}

/// Fill a field once; a repeated key is for the reference path (Python keeps the last).
pub(crate) fn once<T, E: de::Error>(slot: &mut Option<T>, value: T) -> Result<(), E> {
    if slot.replace(value).is_some() {
        return Err(E::custom("repeated key"));
    }
    Ok(())
}

pub(crate) fn required<T, E: de::Error>(slot: Option<T>, name: &'static str) -> Result<T, E> {
    slot.ok_or_else(|| E::missing_field(name))
}

impl<'de> Deserialize<'de> for Anchor<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct AnchorVisitor;
        impl<'de> Visitor<'de> for AnchorVisitor {
            type Value = Anchor<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an anchor object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let (mut id, mut position, mut l2, mut cosine, mut kl, mut drift, mut rec) =
                    (None, None, None, None, None, None, None);
                while let Some(Text(key)) = map.next_key()? {
                    match &*key {
                        "anchor_id" => once(&mut id, map.next_value::<Text>()?.0)?,
                        "position" => once(&mut position, map.next_value::<i64>()?)?,
                        "l2_norm" => once(&mut l2, map.next_value::<f64>()?)?,
                        "cosine_angle" => once(&mut cosine, map.next_value::<f64>()?)?,
                        "kl_divergence" => once(&mut kl, map.next_value::<f64>()?)?,
                        "drift_score" => once(&mut drift, map.next_value::<f64>()?)?,
                        "recommendation" => once(&mut rec, map.next_value::<Text>()?.0)?,
                        _ => {
                            map.next_value::<Unused>()?;
                        }
                    }
                }
                Ok(Anchor {
                    anchor_id: required(id, "anchor_id")?,
                    position: required(position, "position")?,
                    l2_norm: required(l2, "l2_norm")?,
                    cosine_angle: required(cosine, "cosine_angle")?,
                    kl_divergence: required(kl, "kl_divergence")?,
                    drift_score: required(drift, "drift_score")?,
                    recommendation: required(rec, "recommendation")?,
                })
            }
        }
        deserializer.deserialize_map(AnchorVisitor)
    }
}

/// A JSON string, borrowed from the body when it holds no escapes.
pub(crate) struct Text<'a>(pub(crate) Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
        }
        deserializer.deserialize_str(TextVisitor)
    }
}
