//! What an item declares, rendered from rustdoc's JSON (format 57) as one line: a function's
//! signature, a field's or constant's type, a variant's fields, a type's or trait's generics
//! and bounds. A type is named by the path the snapshot lists it at when it is this crate's,
//! and by the path rustdoc gives it otherwise, so a change of signature or field type changes
//! the line, and moving an import does not.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// Renders declarations: the crate's items and other crates' paths by id, and the path each of
/// this crate's public types and traits is listed at.
pub struct Renderer<'a> {
    pub index: &'a Map<String, Value>,
    pub paths: &'a Map<String, Value>,
    pub homes: BTreeMap<String, String>,
}

/// An item's id as the index keys it.
pub fn key(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl Renderer<'_> {
    /// What follows the item's path on its line (empty when it declares nothing more): for
    /// `kind`, the key of its `inner`, and `body`, what that key holds.
    pub fn declaration(&self, kind: &str, body: &Value) -> String {
        match kind {
            "function" => self.function(body),
            "struct_field" => format!(": {}", self.ty(body)),
            "constant" | "static" | "assoc_const" => format!(": {}", self.ty(&body["type"])),
            "type_alias" => format!(
                "{} = {}",
                self.params(&body["generics"]),
                self.ty(&body["type"])
            ),
            "assoc_type" => {
                let mut line = self.params(&body["generics"]);
                line.push_str(&self.bounds_after(&body["bounds"]));
                if !body["type"].is_null() {
                    line.push_str(&format!(" = {}", self.ty(&body["type"])));
                }
                line + &self.wheres(&body["generics"])
            }
            "variant" => self.variant(body),
            "struct" | "enum" | "union" => {
                self.params(&body["generics"]) + &self.wheres(&body["generics"])
            }
            "trait" => {
                let mut line = String::new();
                if body["is_unsafe"] == Value::Bool(true) {
                    line.push_str(" unsafe");
                }
                line.push_str(&self.params(&body["generics"]));
                line.push_str(&self.bounds_after(&body["bounds"]));
                line + &self.wheres(&body["generics"])
            }
            _ => String::new(),
        }
    }

    /// What comes before a function's `fn`: `const `, `async `, `unsafe `, or nothing; nothing
    /// for any other item.
    pub fn qualifiers(kind: &str, body: &Value) -> String {
        let mut words = String::new();
        if kind == "function" {
            for (flag, word) in [
                ("is_const", "const "),
                ("is_async", "async "),
                ("is_unsafe", "unsafe "),
            ] {
                if body["header"].get(flag) == Some(&Value::Bool(true)) {
                    words.push_str(word);
                }
            }
        }
        words
    }

    /// `<generics>(name: type, ...) -> output where ...`.
    fn function(&self, body: &Value) -> String {
        let sig = &body["sig"];
        let mut line = self.params(&body["generics"]);
        let inputs: Vec<String> = list(&sig["inputs"])
            .iter()
            .map(|input| {
                let name = input[0].as_str().unwrap_or("_");
                match name {
                    "self" => self.receiver(&input[1]),
                    _ => format!("{name}: {}", self.ty(&input[1])),
                }
            })
            .collect();
        line.push_str(&format!("({})", inputs.join(", ")));
        if !sig["output"].is_null() {
            line.push_str(&format!(" -> {}", self.ty(&sig["output"])));
        }
        line + &self.wheres(&body["generics"])
    }

    /// `self`, `&self`, `&mut self`, or `self: Type`.
    fn receiver(&self, ty: &Value) -> String {
        if ty.get("generic").and_then(Value::as_str) == Some("Self") {
            return "self".into();
        }
        if let Some(reference) = ty.get("borrowed_ref")
            && reference["type"].get("generic").and_then(Value::as_str) == Some("Self")
        {
            return format!("{}self", self.reference(reference));
        }
        format!("self: {}", self.ty(ty))
    }

    /// A variant's fields: `(type, ...)`, `{ name: type, ... }` or nothing.
    fn variant(&self, body: &Value) -> String {
        match &body["kind"] {
            Value::Object(shape) if shape.contains_key("tuple") => {
                let fields: Vec<String> = list(shape.get("tuple").unwrap_or(&Value::Null))
                    .iter()
                    .map(|id| match id {
                        Value::Null => "_".into(),
                        id => self.field_type(id),
                    })
                    .collect();
                format!("({})", fields.join(", "))
            }
            Value::Object(shape) if shape.contains_key("struct") => {
                let listed = shape.get("struct").map_or(&Value::Null, |s| &s["fields"]);
                let fields: Vec<String> = list(listed)
                    .iter()
                    .map(|id| {
                        let name = self
                            .index
                            .get(&key(id))
                            .and_then(|field| field["name"].as_str())
                            .unwrap_or("_");
                        format!("{name}: {}", self.field_type(id))
                    })
                    .collect();
                format!(" {{ {} }}", fields.join(", "))
            }
            _ => String::new(),
        }
    }

    /// The type of the field `id`.
    fn field_type(&self, id: &Value) -> String {
        self.index
            .get(&key(id))
            .and_then(|field| field["inner"].get("struct_field"))
            .map_or_else(|| "?".into(), |ty| self.ty(ty))
    }

    /// A type as written, its paths made canonical.
    pub fn ty(&self, ty: &Value) -> String {
        let Some((kind, body)) = ty.as_object().and_then(|o| o.iter().next()) else {
            return "?".into();
        };
        match kind.as_str() {
            "resolved_path" => self.path(body),
            "generic" | "primitive" => body.as_str().unwrap_or("?").to_owned(),
            "borrowed_ref" => format!("{}{}", self.reference(body), self.ty(&body["type"])),
            "raw_pointer" => {
                let mutability = if body["is_mutable"] == Value::Bool(true) {
                    "mut"
                } else {
                    "const"
                };
                format!("*{mutability} {}", self.ty(&body["type"]))
            }
            "tuple" => {
                let types: Vec<String> = list(body).iter().map(|t| self.ty(t)).collect();
                format!("({})", types.join(", "))
            }
            "slice" => format!("[{}]", self.ty(body)),
            "array" => format!(
                "[{}; {}]",
                self.ty(&body["type"]),
                body["len"].as_str().unwrap_or("?")
            ),
            "impl_trait" => format!("impl {}", self.bounds(body)),
            "dyn_trait" => {
                let mut traits: Vec<String> = list(&body["traits"])
                    .iter()
                    .map(|t| self.path(&t["trait"]))
                    .collect();
                if let Some(lifetime) = body["lifetime"].as_str() {
                    traits.push(lifetime.to_owned());
                }
                format!("dyn {}", traits.join(" + "))
            }
            "qualified_path" => {
                let trait_path = match &body["trait"] {
                    Value::Null => String::new(),
                    path => format!(" as {}", self.path(path)),
                };
                format!(
                    "<{}{trait_path}>::{}{}",
                    self.ty(&body["self_type"]),
                    body["name"].as_str().unwrap_or("?"),
                    self.args(&body["args"])
                )
            }
            "function_pointer" => {
                let sig = &body["sig"];
                let inputs: Vec<String> = list(&sig["inputs"])
                    .iter()
                    .map(|input| self.ty(&input[1]))
                    .collect();
                let output = match &sig["output"] {
                    Value::Null => String::new(),
                    output => format!(" -> {}", self.ty(output)),
                };
                format!("fn({}){output}", inputs.join(", "))
            }
            "infer" => "_".into(),
            other => format!("<{other}>"),
        }
    }

    /// `&`, `&'a `, `&mut ` or `&'a mut `.
    fn reference(&self, body: &Value) -> String {
        let mut prefix = "&".to_owned();
        if let Some(lifetime) = body["lifetime"].as_str() {
            prefix.push_str(&format!("{lifetime} "));
        }
        if body["is_mutable"] == Value::Bool(true) {
            prefix.push_str("mut ");
        }
        prefix
    }

    /// A path to a type or trait with its arguments: this crate's by the path the snapshot
    /// lists it at, another crate's by the one rustdoc gives it.
    fn path(&self, body: &Value) -> String {
        let id = key(&body["id"]);
        let name = self.homes.get(&id).cloned().unwrap_or_else(|| {
            self.paths
                .get(&id)
                .and_then(|p| p["path"].as_array())
                .and_then(|segments| {
                    segments
                        .iter()
                        .map(Value::as_str)
                        .collect::<Option<Vec<_>>>()
                })
                .map_or_else(
                    || body["path"].as_str().unwrap_or("?").to_owned(),
                    |segments| segments.join("::"),
                )
        });
        name + &self.args(&body["args"])
    }

    /// `<args, Name = type>`, `(inputs) -> output`, or nothing.
    fn args(&self, args: &Value) -> String {
        if let Some(angled) = args.get("angle_bracketed") {
            let mut all: Vec<String> = list(&angled["args"])
                .iter()
                .map(|arg| match arg.as_object().and_then(|o| o.iter().next()) {
                    Some((kind, value)) if kind == "lifetime" => {
                        value.as_str().unwrap_or("'_").to_owned()
                    }
                    Some((kind, value)) if kind == "type" => self.ty(value),
                    Some((kind, value)) if kind == "const" => {
                        value["expr"].as_str().unwrap_or("?").to_owned()
                    }
                    _ => "_".into(),
                })
                .collect();
            for constraint in list(&angled["constraints"]) {
                let name = constraint["name"].as_str().unwrap_or("?");
                let binding = &constraint["binding"];
                if let Some(equal) = binding.get("equality") {
                    let value = equal
                        .get("type")
                        .map_or_else(|| "?".to_owned(), |t| self.ty(t));
                    all.push(format!("{name} = {value}"));
                } else if let Some(bounds) = binding.get("constraint") {
                    all.push(format!("{name}: {}", self.bounds(bounds)));
                }
            }
            if all.is_empty() {
                String::new()
            } else {
                format!("<{}>", all.join(", "))
            }
        } else if let Some(parenthesized) = args.get("parenthesized") {
            let inputs: Vec<String> = list(&parenthesized["inputs"])
                .iter()
                .map(|t| self.ty(t))
                .collect();
            let output = match &parenthesized["output"] {
                Value::Null => String::new(),
                output => format!(" -> {}", self.ty(output)),
            };
            format!("({}){output}", inputs.join(", "))
        } else {
            String::new()
        }
    }

    /// Bounds joined with ` + `.
    fn bounds(&self, bounds: &Value) -> String {
        let all: Vec<String> = list(bounds)
            .iter()
            .map(|bound| {
                if let Some(trait_bound) = bound.get("trait_bound") {
                    let maybe = if trait_bound["modifier"] == "maybe" {
                        "?"
                    } else {
                        ""
                    };
                    format!("{maybe}{}", self.path(&trait_bound["trait"]))
                } else if let Some(lifetime) = bound.get("outlives") {
                    lifetime.as_str().unwrap_or("'_").to_owned()
                } else {
                    "use<..>".into()
                }
            })
            .collect();
        all.join(" + ")
    }

    /// `: bounds`, or nothing without any.
    fn bounds_after(&self, bounds: &Value) -> String {
        if list(bounds).is_empty() {
            String::new()
        } else {
            format!(": {}", self.bounds(bounds))
        }
    }

    /// `<params>` as declared (those `impl Trait` arguments make are left out), or nothing.
    fn params(&self, generics: &Value) -> String {
        let params: Vec<String> = list(&generics["params"])
            .iter()
            .filter_map(|param| {
                let name = param["name"].as_str().unwrap_or("?");
                let (kind, body) = param["kind"].as_object()?.iter().next()?;
                match kind.as_str() {
                    "lifetime" => Some(name.to_owned()),
                    "type" if body["is_synthetic"] == Value::Bool(true) => None,
                    "type" => {
                        let mut param = name.to_owned() + &self.bounds_after(&body["bounds"]);
                        if !body["default"].is_null() {
                            param.push_str(&format!(" = {}", self.ty(&body["default"])));
                        }
                        Some(param)
                    }
                    "const" => Some(format!("const {name}: {}", self.ty(&body["type"]))),
                    _ => Some(name.to_owned()),
                }
            })
            .collect();
        if params.is_empty() {
            String::new()
        } else {
            format!("<{}>", params.join(", "))
        }
    }

    /// ` where type: bounds, ...`, or nothing.
    fn wheres(&self, generics: &Value) -> String {
        let predicates: Vec<String> = list(&generics["where_predicates"])
            .iter()
            .map(|predicate| {
                if let Some(bound) = predicate.get("bound_predicate") {
                    format!(
                        "{}{}",
                        self.ty(&bound["type"]),
                        self.bounds_after(&bound["bounds"])
                    )
                } else if let Some(equal) = predicate.get("eq_predicate") {
                    format!(
                        "{} = {}",
                        self.ty(&equal["lhs"]),
                        equal["rhs"]
                            .get("type")
                            .map_or_else(|| "?".to_owned(), |t| self.ty(t))
                    )
                } else {
                    predicate.to_string()
                }
            })
            .collect();
        if predicates.is_empty() {
            String::new()
        } else {
            format!(" where {}", predicates.join(", "))
        }
    }

    /// The trait a listed type implements (`!Trait` for a negative impl), named as in a
    /// type; `None` for an inherent or blanket impl, and for the unstable marker traits
    /// rustdoc lists beside the stable ones, which no caller can name.
    pub fn trait_impl(&self, block: &Value) -> Option<String> {
        if block["trait"].is_null() || !block["blanket_impl"].is_null() {
            return None;
        }
        let name = self.path(&block["trait"]);
        let unstable = [
            "core::marker::Freeze",
            "core::marker::UnsafeUnpin",
            "core::marker::StructuralPartialEq",
        ];
        if unstable.contains(&name.as_str()) {
            return None;
        }
        let negative = if block["is_negative"] == Value::Bool(true) {
            "!"
        } else {
            ""
        };
        Some(format!("{negative}{name}"))
    }
}

/// The array `value` holds, or none.
fn list(value: &Value) -> &[Value] {
    value.as_array().map_or(&[], Vec::as_slice)
}
