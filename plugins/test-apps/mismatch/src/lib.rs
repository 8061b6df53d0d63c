//! `mismatch`: a component for a world that is not datanotes' (see ../wit/world.wit). Installing
//! it must fail with an error that names the mismatch.

wit_bindgen::generate!({ path: "wit", world: "app" });

use exports::datanotes::app::tools::{Guest, Tool};

struct Mismatch;

impl Guest for Mismatch {
    fn list_tools() -> Vec<Tool> {
        vec![Tool {
            name: "mismatch_hello".into(),
            description: "Never listed: the component does not match the world.".into(),
            input_schema: r#"{"type":"object"}"#.into(),
            tables: vec![],
        }]
    }

    fn instructions() -> String {
        String::new()
    }

    fn call_tool(_name: String, _arguments: String) -> String {
        "\"hello\"".into()
    }
}

export!(Mismatch);
