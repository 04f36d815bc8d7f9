//! Where the values come from, lowest first: the TOML file, then `MCP_CONNECT_*` environment
//! variables (`__` joins nested keys), layered by figment; then two steps on the merged tree that
//! figment has no provider for: variables that address an array entry
//! (`MCP_CONNECT_CLIENTS__0__ID`), and `*_file` secrets (`client_secret_file = "/run/secrets/x"`
//! becomes `client_secret = <the file's contents>`).
//!
//! The environment is a provider of our own rather than `figment::providers::Env` because it
//! keeps the spellings documented before figment: a value is TOML (an array, an inline table, a
//! boolean, an integer) or else a string, and `0123` stays the string `"0123"`; tests hand in
//! their own variables instead of the process's. Two forms are applied on the merged tree
//! instead of merged as a layer, since a figment merge would mean something else:
//! a path through an array (`CLIENTS__0__ID` edits entry 0 of the file's `[[clients]]`, where a
//! layer could only replace the whole array), and an inline table
//! (`MCP_CONNECT_CACHE='{ max_entries = 5 }'`) replaces the file's table (a layer would merge
//! into it).

use std::path::{Path, PathBuf};

use figment::providers::{Format, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};

use super::{ConfigError, ConfigErrors};

const ENV_PREFIX: &str = "MCP_CONNECT_";
/// Environment variables with the prefix that are not config keys: the CLI's own, and the test
/// tooling's (scripts/test, tests/it), which the binaries under test inherit.
const ENV_NOT_KEYS: &[&str] = &[
    "MCP_CONNECT_CONFIG",
    "MCP_CONNECT_LOG",
    "MCP_CONNECT_BIN",
    "MCP_CONNECT_TEST_PG",
    "MCP_CONNECT_PG_BIN",
    "MCP_CONNECT_PREVIOUS_REF",
    "MCP_CONNECT_REQUIRE_PREVIOUS",
];

/// Environment overrides address array entries by index (`CLIENTS__0__ID`) below this.
const MAX_ENV_ARRAY_INDEX: usize = 1000;

/// The name of the environment layer, by which a problem says its value came from there.
pub(super) const ENV_SOURCE: &str = "`MCP_CONNECT_*` environment variables";

/// What `merged` read: the tree, the figment that knows which layer each value's tag stands
/// for, and the keys whose value came from a `*_file` (as `providers.github.client_secret`), so
/// a problem with one is named by what the operator wrote (`client_secret_file`).
pub(super) struct Merged {
    pub root: Dict,
    pub figment: Figment,
    pub from_files: Vec<String>,
}

/// Where `*_file` secrets are read from.
#[derive(Clone, Debug, Default)]
pub enum Files {
    /// At the path written in the configuration (what `serve` and `migrate` do).
    #[default]
    AsWritten,
    /// In this folder, by the written path's file name: `check-config --secrets-dir` reads a
    /// deployment's configuration on a laptop, where `/run/secrets/...` does not exist, against
    /// local stand-ins (the Kubernetes overlay's `secrets/` folder, say), without rewriting it.
    In(PathBuf),
}

impl Files {
    /// The path a `*_file` value is read from.
    fn locate(&self, written: &str) -> PathBuf {
        match self {
            Files::AsWritten => PathBuf::from(written),
            Files::In(dir) => match Path::new(written).file_name() {
                Some(name) => dir.join(name),
                None => dir.join(written),
            },
        }
    }
}

pub(super) fn merged(
    toml_text: &str,
    env: &[(String, String)],
    files: &Files,
) -> Result<Merged, ConfigErrors> {
    // figment's TOML provider reports a syntax error without its place; this names the bytes.
    let file = toml::from_str::<toml::Table>(toml_text)
        .map_err(|e| ConfigError::new(toml_error_key(&e), e.message().to_owned()))?;
    let env = EnvOverrides::parse(env, &file)?;
    let figment = Figment::from(Toml::string(toml_text)).merge(&env);
    let mut root = Provider::data(&figment)
        .map_err(|e| ConfigError::new("(config)", e.to_string()))?
        .remove(&Profile::Default)
        .unwrap_or_default();
    let mut errors = Vec::new();
    for (name, path, value) in &env.in_place {
        if let Err(m) = set_path(&mut root, path, value.clone()) {
            errors.push(ConfigError::new(name.clone(), m));
        }
    }
    let mut from_files = Vec::new();
    if errors.is_empty() {
        resolve_files(&mut root, "", files, &mut from_files, &mut errors);
    }
    if errors.is_empty() {
        Ok(Merged {
            root,
            figment,
            from_files,
        })
    } else {
        Err(ConfigErrors(errors))
    }
}

fn toml_error_key(e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => format!("(file, bytes {}..{})", span.start, span.end),
        None => "(file)".into(),
    }
}

/// The `MCP_CONNECT_*` variables as a figment provider. `MCP_CONNECT_IDENTITY__CLIENT_SECRET=x`
/// sets `identity.client_secret = "x"`.
struct EnvOverrides {
    /// Paths without an array index, merged by figment over the file.
    nested: Dict,
    /// (variable, path, value) applied on the merged tree, in the order given: paths through an
    /// array entry, and inline tables, which replace the file's table as they always have
    /// (a figment merge would union the two).
    in_place: Vec<(String, Vec<String>, Value)>,
}

impl EnvOverrides {
    fn parse(env: &[(String, String)], file: &toml::Table) -> Result<Self, ConfigErrors> {
        let mut me = Self {
            nested: Dict::new(),
            in_place: Vec::new(),
        };
        let mut errors = Vec::new();
        for (name, value) in env {
            let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            if ENV_NOT_KEYS.contains(&name.as_str()) || rest.is_empty() {
                continue;
            }
            let path: Vec<String> = rest.split("__").map(|s| s.to_ascii_lowercase()).collect();
            let value = match parse_env_value(value) {
                Ok(v) => v,
                Err(m) => {
                    errors.push(ConfigError::new(format!("{name} ({})", path.join(".")), m));
                    continue;
                }
            };
            let through_array = path.iter().skip(1).any(|s| s.parse::<usize>().is_ok())
                || crosses_array(file, &path);
            if through_array || matches!(value, Value::Dict(..)) {
                me.in_place.push((name.clone(), path, value));
            } else if let Err(m) = set_path(&mut me.nested, &path, value) {
                errors.push(ConfigError::new(name.clone(), m));
            }
        }
        if errors.is_empty() {
            Ok(me)
        } else {
            Err(ConfigErrors(errors))
        }
    }
}

impl Provider for EnvOverrides {
    fn metadata(&self) -> Metadata {
        Metadata::named(ENV_SOURCE)
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Ok(Map::from([(Profile::Default, self.nested.clone())]))
    }
}

/// Whether `path` goes through an array of the file (`CLIENTS__X`: refused by `set_path` as
/// no array index, where a merge would replace the array with a table).
fn crosses_array(file: &toml::Table, path: &[String]) -> bool {
    let mut table = file;
    for seg in path.iter().take(path.len().saturating_sub(1)) {
        match table.get(seg) {
            Some(toml::Value::Array(_)) => return true,
            Some(toml::Value::Table(t)) => table = t,
            _ => return false,
        }
    }
    false
}

/// Values that look like TOML arrays, inline tables, booleans or integers are parsed as such;
/// everything else (and an integer with a leading zero) is a string.
fn parse_env_value(value: &str) -> Result<Value, String> {
    let t = value.trim();
    if t.starts_with('[') || t.starts_with('{') {
        let doc: toml::Table = toml::from_str(&format!("v = {t}"))
            .map_err(|e| format!("not valid TOML: {}", e.message()))?;
        return Ok(doc.get("v").cloned().map_or(Value::from(value), from_toml));
    }
    if t == "true" || t == "false" {
        return Ok(Value::from(t == "true"));
    }
    if let Ok(n) = t.parse::<i64>() {
        if !t.starts_with('0') || t == "0" {
            return Ok(Value::from(n));
        }
    }
    Ok(Value::from(value))
}

fn from_toml(v: toml::Value) -> Value {
    match v {
        toml::Value::String(s) => Value::from(s),
        toml::Value::Integer(n) => Value::from(n),
        toml::Value::Float(f) => Value::from(f),
        toml::Value::Boolean(b) => Value::from(b),
        toml::Value::Datetime(d) => Value::from(d.to_string()),
        toml::Value::Array(items) => {
            Value::from(items.into_iter().map(from_toml).collect::<Vec<_>>())
        }
        toml::Value::Table(t) => Value::from(
            t.into_iter()
                .map(|(k, v)| (k, from_toml(v)))
                .collect::<Dict>(),
        ),
    }
}

fn set_path(table: &mut Dict, path: &[String], value: Value) -> Result<(), String> {
    let (first, rest) = path.split_first().ok_or("empty key")?;
    if rest.is_empty() {
        table.insert(first.clone(), value);
        return Ok(());
    }
    let entry = table
        .entry(first.clone())
        .or_insert_with(|| Value::from(Dict::new()));
    match entry {
        Value::Dict(_, t) => set_path(t, rest, value),
        Value::Array(_, items) => {
            let (idx, rest2) = rest.split_first().ok_or("empty key")?;
            let i: usize = idx
                .parse()
                .map_err(|_| format!("`{idx}` is not an array index"))?;
            // Entries up to the index are created; a huge index must not exhaust memory.
            if i >= MAX_ENV_ARRAY_INDEX {
                return Err(format!(
                    "`{idx}` is too large an array index (at most {})",
                    MAX_ENV_ARRAY_INDEX - 1
                ));
            }
            while items.len() <= i {
                items.push(Value::from(Dict::new()));
            }
            match &mut items[i] {
                Value::Dict(_, t) if !rest2.is_empty() => set_path(t, rest2, value),
                slot if rest2.is_empty() => {
                    *slot = value;
                    Ok(())
                }
                _ => Err(format!("`{first}` entry {i} is not a table")),
            }
        }
        _ => Err(format!("`{first}` is not a table")),
    }
}

/// Replaces every `foo_file = "/path"` with `foo = <file contents, trailing newline removed>`
/// (`encryption_keys_file`: one key a line).
fn resolve_files(
    table: &mut Dict,
    prefix: &str,
    files: &Files,
    from_files: &mut Vec<String>,
    errors: &mut Vec<ConfigError>,
) {
    let file_keys: Vec<String> = table
        .keys()
        .filter(|k| k.ends_with("_file"))
        .cloned()
        .collect();
    for fk in file_keys {
        let key = fk.trim_end_matches("_file").to_owned();
        let full = format!("{prefix}{fk}");
        if table.contains_key(&key) {
            errors.push(ConfigError::new(
                full,
                format!("give either `{key}` or `{fk}`, not both"),
            ));
            continue;
        }
        let Some(value) = table.remove(&fk) else {
            continue;
        };
        let Some(path) = value.as_str() else {
            errors.push(ConfigError::new(full, "must be a file path"));
            continue;
        };
        let read = files.locate(path);
        let shown = read.display();
        let content = match std::fs::read_to_string(&read) {
            Ok(c) => c,
            Err(e) => {
                errors.push(ConfigError::new(full, format!("cannot read {shown}: {e}")));
                continue;
            }
        };
        let content = content.trim_end_matches(['\n', '\r']);
        if content.trim().is_empty() {
            // An empty secret would fail only at the first user (or worse, be sent).
            errors.push(ConfigError::new(full, format!("{shown} is empty")));
            continue;
        }
        from_files.push(format!("{prefix}{key}"));
        let v = if key == "encryption_keys" {
            Value::from(
                content
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(Value::from)
                    .collect::<Vec<_>>(),
            )
        } else {
            Value::from(content)
        };
        table.insert(key, v);
    }
    for (k, v) in table.iter_mut() {
        match v {
            Value::Dict(_, t) => {
                resolve_files(t, &format!("{prefix}{k}."), files, from_files, errors)
            }
            Value::Array(_, items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    if let Value::Dict(_, t) = item {
                        resolve_files(t, &format!("{prefix}{k}[{i}]."), files, from_files, errors);
                    }
                }
            }
            _ => {}
        }
    }
}
