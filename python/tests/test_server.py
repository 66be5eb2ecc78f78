"""test_server.py — `genparity serve` on 127.0.0.1 (a free port) through the official openai client and raw HTTP:
completions parity with the fixtures (greedy_48 over HTTP), streaming (SSE chunks, usage, [DONE]) equal to the
non-stream result, models and health, bad input (400 malformed JSON / wrong types / ids outside the vocabulary /
max_tokens past the context, 401, 413, 404, 501 chat) with the server still serving afterwards, prefix reuse, client
disconnect cancelling, a bounded concurrency check (16 streams on 4 slots identical to single-request results),
the queue limit (429 + Retry-After, high-water mark never above --max-queue) and SIGTERM draining."""
from __future__ import annotations

import http.client
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

import pytest
from conftest import model_dir, post, reference

openai = pytest.importorskip("openai", reason="the openai client is not installed (pinned in tools/requirements.txt)")


def client(srv, key="none"):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key=key, max_retries=0, timeout=120)


def stream_text(c, **kw):
    """Streams a completion; returns (text, token ids, finish_reason, usage, number of chunks)."""
    text, ids, finish, usage, n = [], [], None, None, 0
    for ch in c.completions.create(stream=True, **kw):
        n += 1
        if ch.choices:
            text.append(ch.choices[0].text)
            finish = ch.choices[0].finish_reason or finish
        ext = (ch.model_extra or {}).get("genparity")
        if ext:
            ids.append(ext["token"])
        if ch.usage:
            usage = ch.usage
    return "".join(text), ids, finish, usage, n


def test_completions_parity_and_stream(start_server):
    name = "tiny-llama"
    srv = start_server(model_dir(name), "--parallel", "2")
    c = client(srv)
    ref = reference(name)
    for p in ref["prompts"]:
        r = c.completions.create(model=name, prompt=p["ids"], max_tokens=48, temperature=0)
        assert r.model_extra["genparity"]["tokens"] == p["greedy_48"]
        assert r.usage.prompt_tokens == len(p["ids"]) and r.usage.completion_tokens == 48
        assert r.choices[0].finish_reason == "length"
        text, ids, finish, usage, n = stream_text(c, model=name, prompt=p["ids"], max_tokens=48, temperature=0)
        assert text == r.choices[0].text and finish == "length"
        assert usage.completion_tokens == 48 and usage.prompt_tokens == len(p["ids"])
        assert all(i in p["greedy_48"] for i in ids) and n >= 2
    # a text prompt is encoded like transformers (with BOS)
    p = ref["prompts"][0]
    r = c.completions.create(model=name, prompt=p["text"], max_tokens=48, temperature=0)
    assert r.model_extra["genparity"]["tokens"] == p["greedy_48"]
    chunks = list(c.completions.create(model=name, prompt=p["ids"], max_tokens=3, temperature=0, stream=True,
                                       stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 3  # OpenAI's usage-only last chunk
    models = c.models.list()
    assert [m.id for m in models.data] == [name]
    assert srv.health()["status"] == "ok"
    r = c.completions.create(model=name, prompt=p["ids"], max_tokens=5, temperature=0, logprobs=3)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == 5 and len(lp.token_logprobs) == 5 and all(len(t) >= 1 for t in lp.top_logprobs)
    assert all(v <= 0 for v in lp.token_logprobs)
    assert srv.stop() == 0


def test_prefix_reuse_and_stop(start_server):
    srv = start_server(model_dir("shakespeare-llama"), "--parallel", "1")
    c = client(srv)
    a = c.completions.create(model="m", prompt="ROMEO:", max_tokens=20, temperature=0, extra_body={"ignore_eos": True})
    ids = a.model_extra["genparity"]["tokens"]
    prompt_ids = a.usage.prompt_tokens
    b = c.completions.create(model="m", prompt="ROMEO:" + a.choices[0].text + "\nJULIET:", max_tokens=8,
                             temperature=0)
    cached = b.usage.prompt_tokens_details.cached_tokens
    print(f"second turn: {b.usage.prompt_tokens} prompt tokens, {cached} reused from the slot's cache")
    assert cached >= prompt_ids + len(ids) // 2
    # stop strings cut the text like the library does
    s = c.completions.create(model="m", prompt="ROMEO:", max_tokens=20, temperature=0, stop=[a.choices[0].text[3:6]])
    assert s.choices[0].finish_reason == "stop" and s.choices[0].text == a.choices[0].text[:3]


def test_bad_input_keeps_serving(start_server):
    srv = start_server(model_dir("tiny-llama"), "--api-key", "sekret", "--max-body", "4096")
    url = srv.url + "/v1/completions"
    auth = {"Authorization": "Bearer sekret"}
    cases = [
        (b"{not json", 400, None),
        (b"[1, 2]", 400, None),
        (json.dumps({"prompt": "x", "max_tokens": "ten"}).encode(), 400, "max_tokens"),
        (json.dumps({"prompt": "x", "temperature": "hot"}).encode(), 400, "temperature"),
        (json.dumps({"prompt": 5}).encode(), 400, "prompt"),
        (json.dumps({"prompt": [1, 32000]}).encode(), 400, "prompt"),
        (json.dumps({"prompt": [1, -1]}).encode(), 400, "prompt"),
        (json.dumps({"prompt": [1, 2], "max_tokens": 5000}).encode(), 400, "max_tokens"),
        (json.dumps({"prompt": [1, 2], "logit_bias": {"99999": 1}}).encode(), 400, "logit_bias"),
        (json.dumps({"prompt": [1, 2], "stop": 3}).encode(), 400, "stop"),
        (json.dumps({"prompt": [1, 2], "n": 2}).encode(), 400, "n"),
        (json.dumps({"prompt": [1, 2], "top_p": 1.5}).encode(), 400, "top_p"),
        (json.dumps({}).encode(), 400, "prompt"),
        (b"x" * 5000, 413, None),
    ]
    for raw, want, param in cases:
        status, hdrs, body = post(url, None, headers=auth, raw=raw)
        print(raw[:60], status, body)
        assert status == want, (raw[:60], status, body)
        assert isinstance(body, dict) and set(body["error"]) >= {"message", "type", "param", "code"}
        if param:
            assert body["error"]["param"] == param
        assert srv.health()["status"] == "ok"
    status, _, body = post(url, {"prompt": [1, 2], "max_tokens": 2})
    assert status == 401 and body["error"]["type"] == "authentication_error"
    status, _, body = post(url, {"prompt": [1, 2], "max_tokens": 2}, headers={"Authorization": "Bearer wrong"})
    assert status == 401
    status, _, body = post(srv.url + "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]},
                           headers=auth)
    assert status == 400 and "no chat template" in body["error"]["message"]  # tiny-llama's folder has none
    status, _, body = post(srv.url + "/v1/nothing", {}, headers=auth)
    assert status == 404
    with pytest.raises(openai.AuthenticationError):
        client(srv, "wrong").completions.create(model="m", prompt=[1, 2], max_tokens=2)
    r = client(srv, "sekret").completions.create(model="m", prompt=[1, 2], max_tokens=2, temperature=0)
    assert r.usage.completion_tokens == 2
    assert srv.stop() == 0


def _stream_raw(url, body, read_chunks):
    """Opens a streaming request, reads read_chunks SSE events, then drops the connection."""
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    got = 0
    while got < read_chunks:
        line = resp.fp.readline()
        if line.startswith(b"data: "):
            got += 1
    conn.sock.close()
    conn.close()


def test_disconnect_cancels_and_sigterm_drains(start_server):
    srv = start_server(model_dir("tiny-llama"), "--parallel", "1")
    _stream_raw(srv.url, {"prompt": [1, 2], "max_tokens": 1000, "stream": True, "ignore_eos": True,
                          "temperature": 0}, 3)
    for _ in range(200):
        h = srv.health()
        if h["cancelled"] >= 1 and h["running"] == 0:
            break
        time.sleep(0.05)
    print("health after the disconnect:", h)
    assert h["cancelled"] >= 1 and h["running"] == 0 and h["served"] == 0
    # SIGTERM while a request runs: it completes, then the server exits 0
    c = client(srv)
    result = {}

    def run():
        result["r"] = c.completions.create(model="m", prompt=[1, 2], max_tokens=300, temperature=0,
                                           extra_body={"ignore_eos": True})
    t = threading.Thread(target=run)
    t.start()
    for _ in range(200):
        if srv.health()["running"] == 1:
            break
        time.sleep(0.01)
    rc = srv.stop()
    t.join(60)
    assert rc == 0
    assert result["r"].usage.completion_tokens == 300
    assert "draining" in "".join(srv.log)


def test_concurrent_streams_identical_and_queue_limit(start_server):
    """16 streaming requests (8 seeds x 2) on 4 slots: each equals the single-request result for its seed."""
    srv = start_server(model_dir("shakespeare-llama"), "--parallel", "4", "--max-queue", "64")
    c = client(srv)
    seeds = list(range(8))
    kw = dict(model="m", prompt="ROMEO:", max_tokens=24, temperature=0.9, top_p=0.95)
    single = {s: stream_text(c, seed=s, **kw)[:2] for s in seeds}
    assert len({v[0] for v in single.values()}) > 1  # seeds matter
    with ThreadPoolExecutor(16) as ex:
        got = list(ex.map(lambda s: (s, stream_text(client(srv), seed=s, **kw)[:2]), seeds * 2))
    assert len(got) == 16
    for s, v in got:
        assert v == single[s], f"seed {s}"
    h = srv.health()
    assert h["rejected"] == 0 and h["queue_high_water"] <= 64
    srv.stop()

    # a small queue: some requests get 429 with Retry-After; the high-water mark never passes --max-queue
    srv = start_server(model_dir("shakespeare-llama"), "--parallel", "1", "--max-queue", "2")
    body = {"prompt": "ROMEO:", "max_tokens": 64, "temperature": 0, "ignore_eos": True}
    with ThreadPoolExecutor(12) as ex:
        res = list(ex.map(lambda _: post(srv.url + "/v1/completions", body), range(12)))
    codes = [r[0] for r in res]
    print("status codes with --parallel 1 --max-queue 2:", codes)
    assert set(codes) <= {200, 429} and codes.count(200) >= 3 and codes.count(429) >= 1
    assert all(r[1].get("Retry-After") == "1" and r[2]["error"]["type"] == "rate_limit_error"
               for r in res if r[0] == 429)
    texts = {r[2]["choices"][0]["text"] for r in res if r[0] == 200}
    assert len(texts) == 1
    h = srv.health()
    assert h["queue_high_water"] <= 2 and h["rejected"] == codes.count(429)


def test_bad_flags_exit_2_with_a_message(start_server):
    import subprocess
    from conftest import genparity_bin
    for args, words in [(["--port", "abc"], "--port"), (["--parallel", "0"], "--parallel"), (["--bogus"], "--bogus"),
                        (["--max-queue"], "needs a value"), (["--adapter", ""], "--adapter")]:
        p = subprocess.run([str(genparity_bin()), "serve", *args], capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and words in p.stderr, (args, p.returncode, p.stderr)
    p = subprocess.run([str(genparity_bin()), "serve", "--model", "/nonexistent/model"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 1 and "/nonexistent/model" in p.stderr
    # an adapter folder that is not one: a load failure (exit 1) naming the missing file
    p = subprocess.run([str(genparity_bin()), "serve", "--adapter", "/nonexistent/adapter"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 1 and "adapter_config.json" in p.stderr, p.stderr
    srv = start_server(model_dir("tiny-llama"))
    port = srv.url.rsplit(":", 1)[1]
    p = subprocess.run([str(genparity_bin()), "serve", "--model", str(model_dir("tiny-llama")), "--port", port],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "cannot listen" in p.stderr


@pytest.mark.parametrize("family,model", [("llama3", "tiny-llama3"), ("qwen3", "tiny-qwen3")])
def test_chat_completions(start_server, fx, family, model):
    """Chat requests render through the model's chat template and encode as transformers' apply_chat_template:
    the greedy reply equals /v1/completions on the reference ids of the same conversation."""
    refs = [r for r in json.loads((fx / "references" / "chat_templates.json").read_text())[family]
            if r["add_generation_prompt"]]
    srv = start_server(model_dir(model))
    c = client(srv)
    for r in refs:
        kw = dict(r["kwargs"])
        tools = kw.pop("tools", None)
        extra = {"chat_template_kwargs": kw} if kw else {}
        if tools:
            extra["tools"] = tools
        chat = c.chat.completions.create(model=model, messages=r["messages"], max_tokens=8, temperature=0,
                                         extra_body=extra)
        plain = c.completions.create(model=model, prompt=r["ids"], max_tokens=8, temperature=0)
        assert chat.usage.prompt_tokens == len(r["ids"])
        assert chat.model_extra["genparity"]["tokens"] == plain.model_extra["genparity"]["tokens"]
        assert chat.choices[0].message.role == "assistant"
        streamed = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
            model=model, messages=r["messages"], max_tokens=8, temperature=0, stream=True, extra_body=extra)
            if ch.choices)
        assert streamed == plain.choices[0].text
    if family == "qwen3":  # a template error is a 400 carrying the template's message; the server keeps serving
        status, _, body = post(srv.url + "/v1/chat/completions", {"messages": [{"role": "assistant"}]})
        assert status == 400 and "content" in body["error"]["message"]
    status, _, body = post(srv.url + "/v1/chat/completions", {"messages": [{"role": 3, "content": "x"}]})
    assert status == 400 and body["error"]["param"] == "messages"
    status, _, body = post(srv.url + "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                               "tools": "no"})
    assert status == 400 and body["error"]["param"] == "tools"
    assert srv.health()["status"] == "ok"
    assert srv.stop() == 0
