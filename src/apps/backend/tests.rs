//! The unit tests of `backend.rs`.

use super::structured_as_object;
use serde_json::json;

#[test]
fn a_non_object_structured_content_moves_into_the_text() {
    let mut r = json!({"content": [{"type": "text", "text": "two"}], "structuredContent": [1, 2]});
    structured_as_object(&mut r);
    assert_eq!(
        r,
        json!({"content": [{"type": "text", "text": "[1,2]"}, {"type": "text", "text": "two"}]})
    );
    // Already the first block: kept once; an object, or none, is left alone.
    let mut r =
        json!({"content": [{"type": "text", "text": "[1, 2]"}], "structuredContent": [1, 2]});
    structured_as_object(&mut r);
    assert_eq!(r, json!({"content": [{"type": "text", "text": "[1, 2]"}]}));
    let mut r = json!({"structuredContent": "s"});
    structured_as_object(&mut r);
    assert_eq!(r, json!({"content": [{"type": "text", "text": "\"s\""}]}));
    for v in [
        json!({"content": [], "structuredContent": {"a": 1}}),
        json!({"content": []}),
    ] {
        let mut r = v.clone();
        structured_as_object(&mut r);
        assert_eq!(r, v);
    }
    let mut r = json!({"content": [], "structuredContent": null});
    structured_as_object(&mut r);
    assert_eq!(r, json!({"content": []}));
}
