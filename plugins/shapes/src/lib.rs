//! `shapes`: a typed component. Nothing here knows datanotes' tool protocol: the engine turns
//! each exported function into a tool, checks and converts its arguments from the WIT types,
//! and answers its result as JSON. `notes` uses the engine import, with the app's own scopes.

wit_bindgen::generate!({ path: "wit", world: "shapes", generate_all });

use datanotes::app::engine;
use exports::example::shapes::{geometry, notes, text};
use std::cell::Cell;

struct Shapes;

impl Guest for Shapes {
    fn hello(name: String) -> String {
        format!("Hello, {name}!")
    }
}

impl geometry::Guest for Shapes {
    fn norm2(p: geometry::Point) -> u64 {
        let (x, y) = (i64::from(p.x), i64::from(p.y));
        (x * x) as u64 + (y * y) as u64
    }

    fn area(s: geometry::Shape, unit: Option<geometry::Unit>) -> f64 {
        let a = match s {
            geometry::Shape::Circle(r) => std::f64::consts::PI * r * r,
            geometry::Shape::Rect((w, h)) => w * h,
            geometry::Shape::Dot => 0.0,
        };
        // The shape's lengths are in cm.
        match unit.unwrap_or(geometry::Unit::Cm) {
            geometry::Unit::Mm => a * 100.0,
            geometry::Unit::Cm => a,
            geometry::Unit::Inch => a / (2.54 * 2.54),
        }
    }

    fn divide(a: i64, b: i64) -> Result<i64, String> {
        if b == 0 {
            return Err("cannot divide by zero".into());
        }
        a.checked_div(b).ok_or_else(|| "the quotient overflows s64".into())
    }

    fn describe() -> String {
        "geometry: norm2, area, divide".into()
    }
}

/// A counter resource (its functions are not tools; `peek` is skipped).
pub struct Counter(Cell<u32>);

impl text::GuestCounter for Counter {
    fn new() -> Self {
        Counter(Cell::new(0))
    }
    fn get(&self) -> u32 {
        self.0.set(self.0.get() + 1);
        self.0.get()
    }
}

impl text::Guest for Shapes {
    type Counter = Counter;

    fn echo(k: text::Kinds) -> text::Kinds {
        k
    }

    fn styled(text: String, style: text::Style) -> String {
        let mut t = text;
        if style.contains(text::Style::BOLD) {
            t = format!("**{t}**");
        }
        if style.contains(text::Style::ITALIC) {
            t = format!("_{t}_");
        }
        if style.contains(text::Style::UNDERLINE) {
            t = format!("<u>{t}</u>");
        }
        t
    }

    fn peek(c: text::CounterBorrow<'_>) -> u32 {
        c.get::<Counter>().0.get()
    }

    fn describe() -> String {
        "text: echo, styled".into()
    }
}

/// JSON text of a string (the engine takes its arguments as JSON).
fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl notes::Guest for Shapes {
    fn add_note(table: String, note: String, stars: u8) -> Result<String, String> {
        let args = format!(
            "{{\"table\": {}, \"values\": {{\"note\": {}, \"stars\": {stars}}}}}",
            quote(&table),
            quote(&note)
        );
        engine::call("insert_row", &args).map_err(|e| e.message)
    }

    fn make_table(table: String) -> Result<String, String> {
        let args = format!(
            "{{\"table\": {}, \"columns\": {{\"note\": {{\"type\": \"text\"}}, \"stars\": {{\"type\": \"integer\"}}}}}}",
            quote(&table)
        );
        engine::call("create_table", &args).map_err(|e| e.message)
    }
}

export!(Shapes);
