fn main() {
    sluice_api_schema::rust::build(&["api/hoststack.api"]);
}
