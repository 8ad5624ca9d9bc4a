def test_login_page_renders(client, db):
    response = client.get("/login/")
    assert response.status_code == 200
    assert b"csrfmiddlewaretoken" in response.content


def test_the_openapi_schema_generates_and_validates_without_warnings(db, tmp_path):
    from django.core.management import call_command

    schema = tmp_path / "schema.yml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(schema))
    assert "/api/v1/workloads/" in schema.read_text()
