def test_healthz_answers_any_host_without_a_session(client, db):
    response = client.get("/healthz", HTTP_HOST="10.1.2.3:8000")
    assert response.status_code == 200 and response.content == b"ok"
    assert "sessionid" not in response.cookies


def test_healthz_is_not_a_way_around_host_validation_for_other_paths(client, db):
    assert client.get("/", HTTP_HOST="evil.example").status_code == 400
