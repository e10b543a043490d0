//! Truth from an app's own file: `truth.map` derives each key tracelab checks from an
//! expression over the file — JSON pointers in braces (`{/phases/0/cpu_ms}`), numbers, `+ - * /`
//! and parentheses. Small enough to parse by hand; every error gives the column (1-based) so a
//! user can find the mistake in a one-line TOML string.

use anyhow::{Result, bail};

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Expr {
    Number(f64),
    /// A JSON pointer (RFC 6901) and the column it starts at.
    Pointer(String, usize),
    Neg(Box<Expr>),
    Binary(Box<Expr>, char, Box<Expr>, usize),
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn column(&self) -> usize {
        self.text[..self.pos].chars().count() + 1
    }

    fn skip_space(&mut self) {
        while self.text[self.pos..].starts_with([' ', '\t']) {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<char> {
        self.skip_space();
        self.text[self.pos..].chars().next()
    }

    fn fail<T>(&self, what: &str) -> Result<T> {
        bail!("column {}: {what} in `{}`", self.column(), self.text)
    }

    /// sum := product (('+' | '-') product)*
    fn sum(&mut self) -> Result<Expr> {
        let mut left = self.product()?;
        while let Some(op @ ('+' | '-')) = self.peek() {
            let col = self.column();
            self.pos += 1;
            left = Expr::Binary(Box::new(left), op, Box::new(self.product()?), col);
        }
        Ok(left)
    }

    /// product := unary (('*' | '/') unary)*
    fn product(&mut self) -> Result<Expr> {
        let mut left = self.unary()?;
        while let Some(op @ ('*' | '/')) = self.peek() {
            let col = self.column();
            self.pos += 1;
            left = Expr::Binary(Box::new(left), op, Box::new(self.unary()?), col);
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Expr> {
        if self.peek() == Some('-') {
            self.pos += 1;
            return Ok(Expr::Neg(Box::new(self.unary()?)));
        }
        self.atom()
    }

    fn atom(&mut self) -> Result<Expr> {
        match self.peek() {
            Some('(') => {
                self.pos += 1;
                let inner = self.sum()?;
                if self.peek() != Some(')') {
                    return self.fail("expected `)`");
                }
                self.pos += 1;
                Ok(inner)
            }
            Some('{') => {
                let col = self.column();
                let rest = &self.text[self.pos + 1..];
                let Some(end) = rest.find('}') else { return self.fail("`{` without its `}`") };
                let pointer = &rest[..end];
                if !(pointer.is_empty() || pointer.starts_with('/')) {
                    return self.fail(&format!("`{{{pointer}}}` is not a JSON pointer (they start with /, e.g. {{/a/b}})"));
                }
                self.pos += end + 2;
                Ok(Expr::Pointer(pointer.to_string(), col))
            }
            Some(c) if c.is_ascii_digit() || c == '.' => {
                let start = self.pos;
                while self.text[self.pos..].starts_with(|c: char| c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E') {
                    self.pos += 1;
                }
                match self.text[start..self.pos].parse() {
                    Ok(n) => Ok(Expr::Number(n)),
                    Err(_) => {
                        self.pos = start;
                        self.fail("not a number")
                    }
                }
            }
            Some(c) => self.fail(&format!("unexpected `{c}` (expected a number, {{/pointer}} or `(`)")),
            None => self.fail("the expression ends too early"),
        }
    }
}

impl Expr {
    pub(crate) fn parse(text: &str) -> Result<Expr> {
        let mut p = Parser { text, pos: 0 };
        let expr = p.sum()?;
        if p.peek().is_some() {
            return p.fail("unexpected text after the expression");
        }
        Ok(expr)
    }

    /// The value over `file`; a missing or non-numeric pointer and a division by zero are errors.
    pub(crate) fn eval(&self, file: &serde_json::Value) -> Result<f64> {
        Ok(match self {
            Expr::Number(n) => *n,
            Expr::Pointer(p, col) => match file.pointer(p) {
                Some(v) => match v.as_f64() {
                    Some(n) => n,
                    None => bail!("column {col}: `{{{p}}}` is {v}, not a number"),
                },
                None => bail!("column {col}: the file has no value at `{{{p}}}`"),
            },
            Expr::Neg(e) => -e.eval(file)?,
            Expr::Binary(l, op, r, col) => {
                let (l, r) = (l.eval(file)?, r.eval(file)?);
                match op {
                    '+' => l + r,
                    '-' => l - r,
                    '*' => l * r,
                    _ if r == 0.0 => bail!("column {col}: division by zero"),
                    _ => l / r,
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(expr: &str, file: serde_json::Value) -> Result<f64> {
        Expr::parse(expr)?.eval(&file)
    }

    #[test]
    fn arithmetic_follows_precedence_and_parentheses() {
        let file = serde_json::json!({"a": 3, "b": 1.0, "nested": {"list": [2, 4]}, "a/b": 7});
        assert_eq!(eval("{/a} / ({/a} + {/b})", file.clone()).unwrap(), 0.75);
        assert_eq!(eval("{/a} / {/a} + {/b}", file.clone()).unwrap(), 2.0);
        assert_eq!(eval("2 * {/nested/list/1} - -1", file.clone()).unwrap(), 9.0);
        assert_eq!(eval("{/a~1b} * 0.5e1", file.clone()).unwrap(), 35.0);
    }

    #[test]
    fn errors_give_the_column() {
        let file = serde_json::json!({"a": 1, "s": "x", "z": 0});
        for (expr, why) in [
            ("{/a} + {/missing}", "column 8: the file has no value at `{/missing}`"),
            ("{/s} * 2", "column 1: `{/s}` is \"x\", not a number"),
            ("{/a} / {/z}", "column 6: division by zero"),
            ("{/a} +", "column 7: the expression ends too early"),
            ("({/a}", "column 6: expected `)`"),
            ("{a}", "column 1: `{a}` is not a JSON pointer"),
            ("{/a} % 2", "column 6: unexpected text after the expression"),
            ("{/a", "`{` without its `}`"),
        ] {
            let err = format!("{:#}", eval(expr, file.clone()).unwrap_err());
            assert!(err.contains(why), "{expr}: {err}");
        }
    }
}
