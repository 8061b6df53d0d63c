//! `sleepy`: a component whose `list-tools` sleeps for a minute, in a host call that epoch
//! interruption cannot cut short. Installing it must fail after the app's timeout_ms, not hang.

wit_bindgen::generate!({ path: "../../../wit", world: "app" });

use exports::datanotes::app::tools::{CallContext, Guest, Tool};

struct Sleepy;

impl Guest for Sleepy {
    fn list_tools() -> Vec<Tool> {
        std::thread::sleep(std::time::Duration::from_secs(60));
        vec![]
    }

    fn instructions() -> String {
        String::new()
    }

    fn call_tool(name: String, _arguments: String, _ctx: CallContext) -> Result<String, String> {
        Err(format!("sleepy has no tool {name}"))
    }
}

export!(Sleepy);
