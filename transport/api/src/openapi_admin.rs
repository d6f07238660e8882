//! What the admin API's OpenAPI document says of each operation
//! (`openapi_operator.rs` builds the document from these).

use crate::bodies::*;
use crate::openapi::Operation;
use crate::routes::Endpoint;
use esim_engine::ErrorCode;
use schemars::JsonSchema;
use serde_json::{json, Value};

pub(crate) const DESCRIPTION: &str = "The operator's API: reseller accounts, their API keys, balances, limits and auto-refill, the eSIM inventory, the finance (conservation) report and the state digest. Every call but this document needs `Authorization: Bearer <admin token>`. Money amounts are USD JSON numbers; errors carry the Error body. The reseller API's own reference is at /api/v2/reseller/openapi.json.";

pub(crate) fn tags() -> Value {
    json!([
        { "name": "Accounts", "description": "Reseller accounts, their balances, freeze, limits and auto-refill" },
        { "name": "Keys", "description": "API keys of the resellers" },
        { "name": "Inventory", "description": "The eSIM profiles left to provision" },
        { "name": "Reports", "description": "Where the money is, and the engine's state" },
        { "name": "Meta", "description": "This document" },
    ])
}

const NO_ACCOUNT: (ErrorCode, &str) = (ErrorCode::AccountNotFound, "no account has that id");

/// The query of `GET /admin/v1/reports/conservation` (schema only: the API reads it).
#[derive(JsonSchema)]
#[allow(dead_code)]
struct ReportQuery {
    /// Only this account (default: every account)
    account_id: String,
    /// The report's format
    #[schemars(extend("enum" = ["json", "csv", "md", "html"], "default" = "json"))]
    format: String,
    /// First day counted: a date (YYYY-MM-DD) or an RFC 3339 time (write the + of an offset as %2B); default: the first day
    from: String,
    /// First day not counted, written like from; default: after today
    until: String,
}

/// The documented operation of an admin endpoint; `None` for another endpoint.
pub(crate) fn operation(endpoint: Endpoint) -> Option<Operation> {
    account_operation(endpoint).or_else(|| other_operation(endpoint))
}

fn account_operation(endpoint: Endpoint) -> Option<Operation> {
    use Endpoint as E;
    use ErrorCode::*;
    Some(match endpoint {
        E::CreateAccount => Operation::new("createAccount", "Accounts", "Create a reseller account")
            .describe("A new account at $0 with its first API key, shown only in this answer.")
            .ok(201, "AccountCreated", "The account and its first key")
            .body::<AccountCreateRequest>(true)
            .errors(&[(ValidationError, "contact_email missing or not an address, or company_name over 256 characters")]),
        E::ListAccounts => Operation::new("listAccounts", "Accounts", "List the accounts")
            .describe("Every account, oldest first, with its balance and counts; never a key.")
            .ok(200, "AccountPage", "A page of accounts")
            .paged()
            .errors(&[(ValidationError, "limit is 0, or limit or offset is not a non-negative integer")]),
        E::TopUp => Operation::new("topUpAccount", "Accounts", "Top up a reseller balance")
            .describe("Credits the reseller balance by hand (a balance.topped_up event follows).")
            .ok(201, "ToppedUp", "The top-up and the new balance")
            .body::<TopUpRequest>(true)
            .errors(&[(ValidationError, "amount_usd missing (sent as amount, the reseller API's name, the message says: did you mean `amount_usd`?), not a number, below 10, above 1000000 or with more than 2 decimals"), NO_ACCOUNT]),
        E::Freeze => Operation::new("freezeAccount", "Accounts", "Freeze or unfreeze an account")
            .describe("A frozen account's changes answer ACCOUNT_SUSPENDED; its reads and key revocations still work.")
            .ok(200, "AccountFrozen", "The account's freeze as it now is")
            .body::<FreezeRequest>(true)
            .errors(&[(ValidationError, "frozen missing or not a boolean"), NO_ACCOUNT]),
        E::SetAutoRefill => Operation::new("setAccountAutoRefill", "Accounts", "Set an account's auto-refill and saved card")
            .describe("Switches auto-refill, sets the amount of a charge and how the simulated saved card answers; absent fields keep their value.")
            .ok(200, "AutoRefillSet", "The auto-refill as it now is")
            .body::<AdminAutoRefillRequest>(true)
            .errors(&[
                (ValidationError, "no field given, card not a known behaviour, enabled not a boolean, or amount_usd outside 10 to 1000000 or with more than 2 decimals"),
                NO_ACCOUNT,
            ]),
        E::SetLimits => Operation::new("setAccountLimits", "Accounts", "Set an account's limits")
            .describe("How many groups the account may have and how many eSIMs each may hold; absent fields keep their value.")
            .ok(200, "LimitsSet", "The limits as they now are")
            .body::<LimitsRequest>(true)
            .errors(&[(ValidationError, "a limit not an integer from 1 to 100000"), NO_ACCOUNT]),
        _ => return None,
    })
}

fn other_operation(endpoint: Endpoint) -> Option<Operation> {
    use Endpoint as E;
    use ErrorCode::*;
    Some(match endpoint {
        E::CreateKey => Operation::new("createAccountKey", "Keys", "Give an account a new API key")
            .describe("The key is shown only in this answer; the account's other keys keep working.")
            .ok(201, "KeyCreated", "The new key")
            .errors(&[NO_ACCOUNT]),
        E::RevokeKey => Operation::new("revokeKey", "Keys", "Revoke an API key")
            .describe("The key (the key itself, in the path) answers 401 INVALID_API_KEY from now on. Revoking a revoked key again succeeds.")
            .ok(200, "Success", "The key is revoked")
            .errors(&[(NotFound, "no key of any account is that key")]),
        E::SetInventory => Operation::new("setInventory", "Inventory", "Set the eSIM inventory")
            .describe("The eSIM profiles left to provision; provisioning answers NO_ESIMS_AVAILABLE at 0. A node serving several shards splits it over them.")
            .ok(200, "InventorySet", "The inventory as it now is")
            .body::<InventoryRequest>(true)
            .errors(&[(ValidationError, "available missing, negative, not an integer or above 1000000000")]),
        E::ConservationReport => Operation::new("getConservationReport", "Reports", "The finance (conservation) report")
            .describe("Money in, where it is now, where it went and the difference, per account and in total, over a period of UTC days, with a per-day movements table. conserved is true when every difference is 0.")
            .ok(200, "FinanceReport", "The report, in the format asked")
            .query::<ReportQuery>()
            .errors(&[(ValidationError, "format not json, csv, md or html, or from or until not a date, or until not after from"), NO_ACCOUNT]),
        E::State => Operation::new("getState", "Reports", "The state digest")
            .describe("A digest of the engine's whole state (equal digests, equal states: a restart or a replica must show the same), the service time, and whether changes are accepted now.")
            .ok(200, "StateDigest", "The digest"),
        E::AdminOpenApi => Operation::document("getAdminOpenApiDocument"),
        _ => return None,
    })
}
