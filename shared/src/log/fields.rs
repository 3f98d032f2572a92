//! The one way to give a line its fields: [`fields!`](crate::log::fields), which writes each named
//! value straight into the line (no JSON value built first, nothing allocated for it), leaves
//! out an `Option` that is `None`, and may end with `..rest`: more [`Fields`] (a metric set,
//! a job's common report fields) written after its own.

use std::borrow::Cow;

use serde::Serialize;
pub use serde::ser::SerializeMap;

/// What a line carries after its common keys: entries written into the line's JSON object.
pub trait Fields {
    /// Writes the entries into `map`, the line being written.
    fn entries<M: SerializeMap>(&self, map: &mut M) -> Result<(), M::Error>;
}

/// No fields.
impl Fields for () {
    fn entries<M: SerializeMap>(&self, _: &mut M) -> Result<(), M::Error> {
        Ok(())
    }
}

/// Fields that may be absent: none written when `None`.
impl<F: Fields> Fields for Option<F> {
    fn entries<M: SerializeMap>(&self, map: &mut M) -> Result<(), M::Error> {
        match self {
            Some(fields) => fields.entries(map),
            None => Ok(()),
        }
    }
}

impl<F: Fields + ?Sized> Fields for &F {
    fn entries<M: SerializeMap>(&self, map: &mut M) -> Result<(), M::Error> {
        (**self).entries(map)
    }
}

/// Two sets of fields, one after the other.
impl<A: Fields, B: Fields> Fields for (A, B) {
    fn entries<M: SerializeMap>(&self, map: &mut M) -> Result<(), M::Error> {
        self.0.entries(map)?;
        self.1.entries(map)
    }
}

/// Fields whose names are known only as the line is written: what a library put in its own
/// event ([`crate::log::forward_dependencies`]).
impl Fields for serde_json::Map<String, serde_json::Value> {
    fn entries<M: SerializeMap>(&self, map: &mut M) -> Result<(), M::Error> {
        self.iter().try_for_each(|(k, v)| map.serialize_entry(k, v))
    }
}

/// A value a field may hold; only an `Option` can be absent, and is then left out of the line.
pub trait Field: Serialize {
    /// True when the field is to be left out.
    fn absent(&self) -> bool {
        false
    }
}

impl<T: Serialize> Field for Option<T> {
    fn absent(&self) -> bool {
        self.is_none()
    }
}

impl<T: Field + ?Sized> Field for &T {
    fn absent(&self) -> bool {
        (**self).absent()
    }
}

macro_rules! present {
    ($($t:ty),*) => { $(impl Field for $t {})* };
}
present!(
    str,
    String,
    Cow<'_, str>,
    bool,
    u8,
    u16,
    u32,
    u64,
    usize,
    i32,
    i64,
    f64
);
present!(serde_json::Value, serde_json::Map<String, serde_json::Value>);
impl<T: Serialize> Field for [T] {}
impl<T: Serialize> Field for Vec<T> {}

/// A set of [`Fields`] as a JSON object of its own (for tests that read one).
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct Object<F>(pub(crate) F);

#[cfg(test)]
impl<F: Fields> Serialize for Object<F> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        self.0.entries(&mut map)?;
        map.end()
    }
}

/// A log line's fields, by name: `fields! { provider: P::NAME, error: e.to_string() }`, each
/// value written as it is (a `None` left out), optionally ending `; ..rest` with more
/// [`Fields`](crate::log::Fields) written after them. What [`Log::write`](crate::log::Log::write)
/// takes.
#[doc(hidden)]
#[macro_export]
macro_rules! __log_fields {
    ($($name:ident : $value:expr),* $(,)? $(; .. $rest:expr)?) => {{
        #[allow(non_camel_case_types)]
        struct Named<$($name,)* __Rest> {
            $($name: $name,)*
            __rest: __Rest,
        }
        #[allow(non_camel_case_types)]
        impl<$($name: $crate::log::Field,)* __Rest: $crate::log::Fields> $crate::log::Fields
            for Named<$($name,)* __Rest>
        {
            fn entries<M: $crate::log::SerializeMap>(
                &self,
                map: &mut M,
            ) -> ::std::result::Result<(), M::Error> {
                $(
                    if !$crate::log::Field::absent(&self.$name) {
                        map.serialize_entry(stringify!($name), &self.$name)?;
                    }
                )*
                $crate::log::Fields::entries(&self.__rest, map)
            }
        }
        Named {
            $($name: $value,)*
            __rest: $crate::log::fields!(@rest $($rest)?),
        }
    }};
    (@rest) => { () };
    (@rest $rest:expr) => { $rest };
}

#[cfg(test)]
mod tests {
    use super::Object;

    /// Fields are written in order, a `None` left out, the rest after them.
    #[test]
    fn a_line_s_fields_leave_out_a_none_and_end_with_the_rest() {
        let absent: Option<&str> = None;
        let rest = crate::log::fields! { c: 3_u8, e: absent };
        let fields = crate::log::fields! { a: "x", b: absent, d: Some(true); ..rest };
        let written = serde_json::to_string(&Object(fields)).expect("written");
        assert_eq!(written, r#"{"a":"x","d":true,"c":3}"#);
        let none = serde_json::to_string(&Object(crate::log::fields! {})).expect("written");
        assert_eq!(none, "{}");
    }
}
