use crate::kit::*;
use serde_json::json;

#[test]
fn serves_and_refuses_without_token() {
    let s = Server::start();
    let (st, v) = s.get("/datanotes/health");
    assert_eq!(st, 200);
    assert_eq!(v["ok"], true);
    let (st, v) = s.post("/datanotes/list_tables/", None, &json!({}));
    assert_eq!(st, 401, "{v}");
    assert_eq!(v["error"]["code"], "unauthorized");
    let (st, _) = s.post("/datanotes/list_tables/", Some("dn_owner_bad"), &json!({}));
    assert_eq!(st, 401);
    assert_eq!(s.ok("list_tables", json!({}))["tables"], json!([]));
}
