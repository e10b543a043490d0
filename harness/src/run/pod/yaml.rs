//! A JSON value written as block-style YAML, the way Pod manifests are written by hand: mappings
//! and sequences indented by two, every string double-quoted with JSON's escapes (a valid YAML
//! double-quoted scalar, so `"0.5"`, `"true"` or `"1654"` stay strings), numbers and booleans
//! bare. Keys are written as they are when plain, quoted otherwise.

use serde_json::Value;

/// `value` as a YAML document, after `header` comment lines.
pub(crate) fn to_yaml(value: &Value, header: &[&str]) -> String {
    let mut out = String::new();
    for line in header {
        out.push_str("# ");
        out.push_str(line);
        out.push('\n');
    }
    write_block(&mut out, value, 0);
    out
}

fn scalar(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => Value::String(s.clone()).to_string(),
        Value::Array(a) if a.is_empty() => "[]".into(),
        Value::Object(o) if o.is_empty() => "{}".into(),
        _ => unreachable!("not a scalar"),
    }
}

fn is_scalar(v: &Value) -> bool {
    match v {
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => true,
    }
}

fn key(k: &str) -> String {
    let plain = !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/')) && !k.starts_with('-');
    if plain { k.to_string() } else { Value::String(k.to_string()).to_string() }
}

/// Writes a non-scalar `v` whose lines start at column `indent`.
fn write_block(out: &mut String, v: &Value, indent: usize) {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                if is_scalar(v) {
                    out.push_str(&format!("{pad}{}: {}\n", key(k), scalar(v)));
                } else if v.is_array() {
                    // Sequences under a key sit at the key's column, as kubectl writes them.
                    out.push_str(&format!("{pad}{}:\n", key(k)));
                    write_block(out, v, indent);
                } else {
                    out.push_str(&format!("{pad}{}:\n", key(k)));
                    write_block(out, v, indent + 2);
                }
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for item in items {
                if is_scalar(item) {
                    out.push_str(&format!("{pad}- {}\n", scalar(item)));
                } else {
                    // The item's first line follows the dash; the rest align under it.
                    let mut inner = String::new();
                    write_block(&mut inner, item, indent + 2);
                    let rest = &inner[indent + 2..];
                    out.push_str(&format!("{pad}- {rest}"));
                }
            }
        }
        other => out.push_str(&format!("{pad}{}\n", scalar(other))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pod_like_value_reads_as_kubectl_writes_it() {
        let v = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "labels": {"tracelab": "1"}},
            "spec": {
                "shareProcessNamespace": true,
                "containers": [
                    {"name": "app", "command": ["sh", "-c", "echo \"$@\""], "env": [{"name": "A", "value": "1"}]},
                    {"name": "tools", "resources": {"limits": {"cpu": "0.5"}}}
                ],
                "volumes": [{"name": "tmp", "emptyDir": {}}]
            }
        });
        let text = to_yaml(&v, &["made by a test"]);
        assert_eq!(
            text,
            r#"# made by a test
apiVersion: "v1"
kind: "Pod"
metadata:
  labels:
    tracelab: "1"
  name: "p"
spec:
  containers:
  - command:
    - "sh"
    - "-c"
    - "echo \"$@\""
    env:
    - name: "A"
      value: "1"
    name: "app"
  - name: "tools"
    resources:
      limits:
        cpu: "0.5"
  shareProcessNamespace: true
  volumes:
  - emptyDir: {}
    name: "tmp"
"#
        );
    }
}
