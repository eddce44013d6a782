//! Where a Kong entry's model version comes from when not from a header: the `model` member
//! of the request body Kong logged (`request.body`: a JSON object, or the JSON text of one)
//! or the `name` of the entry's `route` or `service`, as `kong._model_of` reads them. What is
//! there but not a string (or null) is `Doubtful`: the reference path names the problem.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::read::{Text, Unused};

/// A model version as found: absent, a string, or something the reference path judges.
pub(crate) enum Found<'a> {
    Absent,
    Text(Cow<'a, str>),
    Doubtful,
}

impl Found<'_> {
    fn into_owned(self) -> Found<'static> {
        match self {
            Found::Absent => Found::Absent,
            Found::Text(text) => Found::Text(Cow::Owned(text.into_owned())),
            Found::Doubtful => Found::Doubtful,
        }
    }
}

/// Skip a sequence, read as strictly as orjson reads it.
fn skip_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<Unused>()?.is_some() {}
    Ok(())
}

/// The `name` member of an object (`model`, `name`): Doubtful when repeated (Python keeps
/// the last; the reference path decides).
fn member<'de, A: MapAccess<'de>>(mut map: A, name: &str) -> Result<Found<'de>, A::Error> {
    let (mut found, mut seen, mut repeated) = (Found::Absent, false, false);
    while let Some(Text(key)) = map.next_key()? {
        if key == name {
            repeated |= seen;
            seen = true;
            found = map.next_value_seed(Member)?;
        } else {
            map.next_value::<Unused>()?;
        }
    }
    Ok(if repeated { Found::Doubtful } else { found })
}

/// A member's value: a string, null (absent), else Doubtful.
struct Member;

impl<'de> DeserializeSeed<'de> for Member {
    type Value = Found<'de>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Member {
    type Value = Found<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a model version")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Found::Text(Cow::Borrowed(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Found::Text(Cow::Owned(v.to_owned())))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Found::Absent)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Found::Doubtful)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Found::Doubtful)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Found::Doubtful)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Found::Doubtful)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        skip_seq(seq).map(|()| Found::Doubtful)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<Unused, Unused>()?.is_some() {}
        Ok(Found::Doubtful)
    }
}

/// An object whose member `key` is the model version (`route`, `service`: `name`; a
/// request body: `model`); anything but an object holds none. A request body may also be
/// a string (`body`): the JSON text of the body, read for an object in turn.
pub(crate) struct Holder {
    pub(crate) key: &'static str,
    pub(crate) text: bool,
}

impl<'de> DeserializeSeed<'de> for Holder {
    type Value = Found<'de>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Holder {
    type Value = Found<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        if !self.text {
            return Ok(Found::Absent);
        }
        // The body as Kong logged it: the reference parses it with orjson, and a body that
        // is not a JSON object holds no model. Text that does not start as an object cannot
        // be one; what serde_json does not read, the reference decides.
        if !v
            .trim_start_matches([' ', '\t', '\n', '\r'])
            .starts_with('{')
        {
            return Ok(Found::Absent);
        }
        let mut inner = serde_json::Deserializer::from_str(v);
        let holder = Holder {
            key: self.key,
            text: false,
        };
        Ok(match inner.deserialize_any(holder) {
            Ok(found) if inner.end().is_ok() => found.into_owned(),
            _ => Found::Doubtful,
        })
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Found::Absent)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Found::Absent)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Found::Absent)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Found::Absent)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Found::Absent)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        skip_seq(seq).map(|()| Found::Absent)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        member(map, self.key)
    }
}
