"""dz-serve end to end, with the `openai` package as a real client.

Usage: check_dz_serve.py BIN_DIR

A tiny random base and two fine-tunes of it (base + noise, so every variant
answers differently), compressed by dz-compress; one reconstructed by
decompress and served alone as a reference. Checks: the variants served
together from their deltas answer exactly (greedy) what the reconstruction
answers alone, also under concurrency; completions, chat, streaming and the
models list through `openai`; /metrics parsed by prometheus_client; 64
concurrent clients without a failure; bad requests are 4xx in OpenAI's error
shape (a table of requests and the statuses and codes OpenAI and vLLM give
them) and the server keeps serving; load_delta / unload_delta; a base
configured like Llama 3.1 with a SentencePiece-style tokenizer answers and
stops as transformers does; a client that
disconnects mid-stream frees its slot; SIGTERM refuses new requests, finishes
the one in flight and exits 0; --shutdown-timeout ends what is still in flight
with an error, and a second signal exits at once.
"""
import concurrent.futures
import http.client
import json
import select
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

try:
    import openai
    import torch
    from prometheus_client.parser import text_string_to_metric_families
    from safetensors.torch import load_file, save_file
except ImportError as e:  # the project's Python environment lacks a package
    print(f"SKIP: {e}; run scripts/install-deps.sh")
    sys.exit(77)

BIN = Path(sys.argv[1])
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message, flush=True)


def run(*args):
    subprocess.run([str(a) for a in args], check=True, stdout=subprocess.DEVNULL)


class Server:
    """A dz-serve process on a free port."""

    def __init__(self, tmp, name, *args, env=None):
        self.port_file = tmp / f"{name}.port"
        self.log = open(tmp / f"{name}.log", "w")
        self.proc = subprocess.Popen(
            [str(BIN / "dz-serve"), "serve", "--port", "0", "--port-file", str(self.port_file), "--threads", "1",
             *map(str, args)], stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        for _ in range(600):
            if self.port_file.exists() or self.proc.poll() is not None:
                break
            time.sleep(0.1)
        if not self.port_file.exists():
            raise RuntimeError(f"{name} did not start: " + (tmp / f"{name}.log").read_text())
        self.port = int(self.port_file.read_text())
        self.url = f"http://127.0.0.1:{self.port}"
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key="none", max_retries=0, timeout=120)

    def request(self, method, path, body=None, raw=None, headers=None, raw_reply=False):
        """(status, parsed JSON or text) of one HTTP request."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        text = resp.read().decode()
        conn.close()
        if raw_reply:
            return resp.status, text
        try:
            return resp.status, json.loads(text)
        except ValueError:
            return resp.status, text

    def metrics(self):
        status, text = self.request("GET", "/metrics")
        assert status == 200
        return {f.name: f for f in text_string_to_metric_families(text)}

    def sample(self, family, labels=None, suffix=""):
        for s in self.metrics()[family].samples:
            if s.name == family + suffix and all(s.labels.get(k) == v for k, v in (labels or {}).items()):
                return s.value
        return 0.0

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=120)
        self.log.close()


def make_fine_tune(base, out, seed):
    out.mkdir()
    weights = load_file(str(base / "model.safetensors"))
    g = torch.Generator().manual_seed(seed)
    save_file({k: v + 0.03 * torch.randn(v.shape, generator=g) for k, v in weights.items()},
              str(out / "model.safetensors"), metadata={"format": "pt"})
    for f in ("config.json", "tokenizer.json"):
        shutil.copy(base / f, out / f)


def greedy(server, model, prompt, max_tokens=24):
    r = server.client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0)
    return r.choices[0].text, r.usage.completion_tokens


def sentencepiece_style_tokenizer(path):
    """A Llama-2-style tokenizer (Metaspace, byte fallback) trained here with `tokenizers`:
    decoding drops a leading space, so a completion's text depends on its context."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    corpus = ["the quick brown fox jumps over the lazy dog and the cat sat on the mat"] * 50
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=120, special_tokens=["<unk>", "<s>", "</s>"],
                                                        show_progress=False))
    spec = json.loads(tok.to_str())
    for b in range(256):  # SentencePiece keeps a token per byte
        spec["model"]["vocab"].setdefault("<0x%02X>" % b, len(spec["model"]["vocab"]))
    tok = Tokenizer.from_str(json.dumps(spec))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok.save(str(path))
    return tok


def check_llama3_style(tmp, servers):
    """A base configured like Llama 3.1 (rope_scaling llama3, several end-of-sequence ids)
    with a SentencePiece-style tokenizer: served greedily, it answers what transformers'
    model of the same folder answers (the text decoded after the prompt, as transformers
    decodes prompt + completion), and stops where transformers' generate stops."""
    from transformers import GenerationConfig, LlamaForCausalLM
    tok = sentencepiece_style_tokenizer(tmp / "sp-tokenizer.json")
    config = {"vocab_size": tok.get_vocab_size(), "hidden_size": 96, "intermediate_size": 160,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 128, "rope_theta": 10000.0, "bos_token_id": 1, "eos_token_id": 2,
              "initializer_range": 0.3,
              "rope_scaling": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 32}}
    (tmp / "l3-config.json").write_text(json.dumps(config))
    run(BIN / "sailor-run", "-q", "init", "--config", tmp / "l3-config.json", "--tokenizer", tmp / "sp-tokenizer.json",
        "--seed", "4", "-o", tmp / "l3")
    hf = LlamaForCausalLM.from_pretrained(str(tmp / "l3"), torch_dtype=torch.float32).eval()
    # Byte tokens are banned (logit_bias, here and in the requests): a random model strings
    # them into invalid UTF-8, whose U+FFFD the byte-fallback decoder spreads back over
    # bytes a stream has already sent. A prompt whose greedy completion starts with a
    # word (a "\u2581" piece): its leading space is what decoding the completion alone drops.
    byte_ids = [tok.token_to_id("<0x%02X>" % b) for b in range(256)]
    for text in ("the lazy cat", "a quick dog", "the mat", "brown fox", "over the", "jumps", "cat sat on"):
        prompt = tok.encode(text).ids
        ids, decided = list(prompt), 0
        with torch.no_grad():
            for _ in range(40):
                logits = hf(torch.tensor([ids])).logits[0, -1]
                logits[byte_ids] -= 100.0
                top2 = torch.topk(logits, 2).values
                if decided == len(ids) - len(prompt) and top2[0] - top2[1] >= 1e-3:
                    decided += 1
                ids.append(int(torch.argmax(logits)))
        if tok.id_to_token(ids[len(prompt)]).startswith("\u2581"):
            break
    generated = ids[len(prompt):]
    # The last token within the decided steps that had not occurred before becomes a
    # second end-of-sequence id, listed in config.json and generation_config.json as
    # Llama 3.1 lists its end-of-turn id.
    end = min(decided, generated.index(2) if 2 in generated else decided)  # before the model's own end
    firsts = [i for i in range(1, end) if generated[i] not in generated[:i]]
    check(end >= 12 and firsts, f"llama3-style base: {decided} decided steps, end at {end}, new tokens at {firsts}")
    if not firsts:
        return
    k = firsts[-1]
    config["eos_token_id"] = [2, generated[k]]
    hf_config = json.loads((tmp / "l3" / "config.json").read_text())
    hf_config["eos_token_id"] = config["eos_token_id"]
    (tmp / "l3" / "config.json").write_text(json.dumps(hf_config))
    (tmp / "l3" / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": [2, generated[k]]}))
    with torch.no_grad():
        generation = GenerationConfig.from_pretrained(str(tmp / "l3"))
        generation.sequence_bias = {(i,): -100.0 for i in byte_ids}
        hf_out = hf.generate(torch.tensor([prompt]), generation_config=generation, max_new_tokens=40,
                             do_sample=False)[0].tolist()
    check(hf_out[len(prompt):] == generated[:k + 1], f"transformers' generate {hf_out[len(prompt):]}, "
          f"expected to stop at {generated[k]} after {generated[:k]}")
    server = Server(tmp, "llama3", "--base", tmp / "l3", "--max-context", 128)
    servers.append(server)
    r = server.client.completions.create(model="l3", prompt=prompt, max_tokens=40, temperature=0,
                                         logit_bias={str(i): -100 for i in byte_ids})
    context = tok.decode(prompt, skip_special_tokens=True)
    want = tok.decode(prompt + generated[:k], skip_special_tokens=True)[len(context):]
    check(want != tok.decode(generated[:k], skip_special_tokens=True), "the completion decodes alike alone and "
          "after its prompt: the check proves nothing")
    check(r.choices[0].text == want and r.choices[0].finish_reason == "stop",
          f"llama3-style base: served {r.choices[0].text!r} ({r.choices[0].finish_reason}), "
          f"transformers {want!r} then end of sequence")
    # The end-of-sequence token counts, as OpenAI and vLLM count it.
    check(r.usage.completion_tokens == k + 1, f"llama3-style base: usage {r.usage}, {k} tokens and the end")


def check_access(tmp, servers):
    """With --api-key (here from DZ_SERVE_API_KEY) every endpoint but /health and
    /metrics needs the key; runtime loading is off without --allow-runtime-loading,
    and on, reads only inside --delta-dir, answering alike for every path outside it,
    whether it exists, is a folder or is a file."""
    guarded = Server(tmp, "guarded", "--base", tmp / "base", "--delta-dir", tmp / "deltas", "--max-context", 256,
                     env={"DZ_SERVE_API_KEY": "s3cret"})
    servers.append(guarded)
    for path in ("/v1/models", "/v1/models/ft1"):
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            status, reply = guarded.request("GET", path, headers=headers)
            check(status == 401 and reply["error"]["type"] == "invalid_request_error",
                  f"GET {path} with {headers}: {status} {reply}")
    status, _ = guarded.request("POST", "/v1/completions", {"model": "ft1", "prompt": "x", "max_tokens": 2})
    check(status == 401, f"completion without the key: {status}")
    check(guarded.request("GET", "/health")[0] == 200, "/health needs no key")
    check(guarded.request("GET", "/metrics", raw_reply=True)[0] == 200, "/metrics needs no key")
    keyed = openai.OpenAI(base_url=f"http://127.0.0.1:{guarded.port}/v1", api_key="s3cret", max_retries=0)
    check(keyed.completions.create(model="ft1", prompt="Hello", max_tokens=4, temperature=0).usage.completion_tokens
          >= 1, "a completion with the key")
    # Runtime loading is off here: 403, whatever the path.
    auth = {"Authorization": "Bearer s3cret"}
    for body in ({"name": "x", "path": "ft1.h5"}, {"name": "x", "path": "/etc/passwd"}):
        status, reply = guarded.request("POST", "/v1/load_delta", body, headers=auth)
        check(status == 403 and "--allow-runtime-loading" in reply["error"]["message"], f"load_delta off: {status}")
    check(guarded.request("POST", "/v1/unload_delta", {"name": "ft1"}, headers=auth)[0] == 403, "unload_delta off")
    # On: paths outside --delta-dir, existing or not, files or folders, get one answer.
    loader = Server(tmp, "loader", "--base", tmp / "base", "--delta-dir", tmp / "deltas", "--allow-runtime-loading",
                    "--max-context", 256)
    servers.append(loader)
    (tmp / "deltas" / "escape.h5").symlink_to(tmp / "ft1.h5")  # a link out of the folder
    outside = [str(tmp / "ft1.h5"), "/etc/passwd", "/etc", "/no/such/file.h5", "../ft1.h5", "escape.h5",
               str(tmp / "deltas" / ".." / "ft1.h5")]
    for path in outside:
        status, reply = loader.request("POST", "/v1/load_delta", {"name": "x", "path": path})
        check(status == 400 and reply["error"]["message"] ==
              f"no delta container '{path}' in the server's delta folders",
              f"load_delta {path}: {status} {reply}")
    (tmp / "deltas" / "escape.h5").unlink()
    check(loader.request("POST", "/v1/load_delta", {"name": "y", "path": "later/ft1.h5"})[0] == 200,
          "a container inside --delta-dir")


def check_stalled_clients(tmp, servers):
    """140 connections that send part of a request and stall (more than the old
    fixed pool of 128 threads) leave /health and completions answered while they
    are all still open: the server does not wait for their read timeouts."""
    # No request deadline here: this checks that threads alone keep up, however long the stalls last.
    server = Server(tmp, "stalled", "--base", tmp / "base", "--max-context", 256, "--request-timeout", 0)
    servers.append(server)
    stalled = []
    try:
        for _ in range(140):
            sock = socket.create_connection(("127.0.0.1", server.port))
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n")
            stalled.append(sock)
        check(server.request("GET", "/health")[0] == 200, "/health beside stalled connections")
        r = server.client.completions.create(model="base", prompt="Hello", max_tokens=3, temperature=0)
        check(r.usage.completion_tokens >= 1, "a completion beside stalled connections")
        # All still open: nothing was answered by dropping them.
        still_open = 0
        for sock in stalled:
            try:
                still_open += sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
            except BlockingIOError:
                still_open += 1
        check(still_open == len(stalled), f"{len(stalled) - still_open} stalled connections were dropped first")
    finally:
        for sock in stalled:
            sock.close()


def status_of(sock):
    """The status code of the first response on `sock`, read to its end ('' if closed without one)."""
    sock.settimeout(120)
    data = b""
    try:
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    return data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/1.1 ") else ""


def check_client_limits(tmp, servers):
    """--max-connections-per-client: a client's connection past the cap is
    answered 429 before anything is read. --request-timeout: a request that
    has not arrived whole in time ends the connection, whether the client
    stalls or trickles a byte at a time (each read well within the 30 s
    per-read timeout). Neither depends on how fast this machine is: the cap
    is checked with no request deadline, the deadline on its own."""
    capped = Server(tmp, "capped", "--base", tmp / "base", "--max-context", 256,
                    "--max-connections-per-client", 4, "--request-timeout", 0)
    servers.append(capped)
    socks = []
    for _ in range(5):
        sock = socket.create_connection(("127.0.0.1", capped.port))
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # the headers never end
        socks.append(sock)
    # Four hold their places (for the 30 s per-read timeout); whichever came
    # fifth to the server is answered at once.
    readable, _, _ = select.select(socks, [], [], 120)
    check(len(readable) >= 1 and status_of(readable[0]) == "429",
          f"5 stalled connections with a cap of 4: {len(readable)} answered")
    for sock in socks:
        sock.close()
    # The places are free again once the server sees the connections close
    # (just after the client does: ask until then).
    status = None
    for _ in range(100):
        status = capped.request("GET", "/health")[0]
        if status != 429:
            break
    check(status == 200, f"/health after the capped connections closed: {status}")

    timed = Server(tmp, "timed", "--base", tmp / "base", "--max-context", 256, "--request-timeout", 2)
    servers.append(timed)
    stalled = socket.create_connection(("127.0.0.1", timed.port))
    stalled.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    # httplib answers a request whose headers stop arriving with 400.
    check(status_of(stalled) in ("400", ""), "a stalled request was not ended at its deadline")
    stalled.close()
    trickle = socket.create_connection(("127.0.0.1", timed.port))
    trickle.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: ")
    sent, ended = 0, False
    for _ in range(400):  # 400 bytes at 10 per second: 40 s if nobody stops it
        readable, _, _ = select.select([trickle], [], [], 0.1)
        if readable:
            ended = True
            break
        try:
            trickle.send(b"a")
            sent += 1
        except OSError:
            ended = True
            break
    check(ended and sent < 400, f"a request trickled a byte at a time was not ended ({sent} bytes sent)")
    trickle.close()
    check(timed.request("GET", "/health")[0] == 200, "/health after the ended requests")


def check_choices(s):
    """n, best_of and batches of prompts as vLLM serves them, each choice
    checked against the single request it must equal; and echo's text offsets."""
    one = lambda **kw: s.client.completions.create(**{"model": "ft1", "max_tokens": 8, **kw})  # noqa: E731
    # n: choice 0 is the request with n = 1 and the same seed; the others have their own seeds.
    many = one(prompt="Hello", n=3, temperature=1.0, seed=11)
    single = one(prompt="Hello", temperature=1.0, seed=11)
    texts = [c.text for c in sorted(many.choices, key=lambda c: c.index)]
    check([c.index for c in many.choices] == [0, 1, 2] and texts[0] == single.choices[0].text and len(set(texts)) > 1,
          f"n = 3: {texts} against n = 1: {single.choices[0].text!r}")
    # The prompt counts once (OpenAI's and vLLM's usage); every choice's tokens count.
    check(many.usage.prompt_tokens == single.usage.prompt_tokens and 3 <= many.usage.completion_tokens <= 3 * 9,
          f"n = 3 usage: {many.usage} against n = 1: {single.usage}")
    # A batch of prompts: choice i answers prompt i, as it would alone.
    prompts = ["Hello", "The quick", "1 2 3"]
    batch = one(prompt=prompts, temperature=0)
    alone = [one(prompt=p, temperature=0) for p in prompts]
    check([c.text for c in sorted(batch.choices, key=lambda c: c.index)] == [a.choices[0].text for a in alone] and
          batch.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone),
          f"a batch of prompts: {[c.text for c in batch.choices]} against {[a.choices[0].text for a in alone]}")
    # best_of: of the sequences n = best_of would return (same seeds), the most likely one.
    candidates = one(prompt="Hello", n=4, temperature=1.0, seed=5, logprobs=0).choices
    best = one(prompt="Hello", n=1, best_of=4, temperature=1.0, seed=5)
    most_likely = max(candidates, key=lambda c: sum(c.logprobs.token_logprobs))
    check(len(best.choices) == 1 and best.choices[0].text == most_likely.text,
          f"best_of 4: {best.choices[0].text!r}, the most likely of n = 4: {most_likely.text!r}")
    # Streaming n = 2: each index's pieces make up the non-streamed choice of that index.
    streamed = {0: "", 1: ""}
    finished = set()
    for chunk in one(prompt="Hello", n=2, temperature=1.0, seed=11, stream=True):
        for c in chunk.choices:
            streamed[c.index] += c.text
            if c.finish_reason:
                finished.add(c.index)
    check(streamed == {0: texts[0], 1: texts[1]} and finished == {0, 1},
          f"streamed n = 2: {streamed}, finished {finished}; not streamed: {texts[:2]}")
    # logprobs: true on completions is one alternative, as vLLM reads it.
    lp = one(prompt="Hello", temperature=0, max_tokens=3, extra_body={"logprobs": True}).choices[0].logprobs
    check(lp is not None and len(lp.tokens) == 3 and all(len(t) >= 1 for t in lp.top_logprobs),
          f"logprobs: true: {lp}")
    # Echo of a text prompt: the <s> before it is not in the text, so it takes no characters.
    echo = s.client.completions.create(model="ft1", prompt="Hello", max_tokens=0, echo=True, logprobs=0).choices[0]
    off, toks = echo.logprobs.text_offset, echo.logprobs.tokens
    check(echo.text == "Hello" and off[0] == 0 and off[1] == 0 and
          all(echo.text[o:].startswith(t) for o, t in zip(off[1:], toks[1:])),
          f"echo text offsets: {echo.text!r}, {list(zip(toks, off))}")


def check_swap_reload(tmp, servers):
    """Swap mode keys its resident model by the variant loaded, not by its name: a
    name unloaded and loaded again from another container serves the new weights."""
    swap = Server(tmp, "swap", "--base", tmp / "base", "--delta-dir", tmp / "deltas", "--mode", "swap",
                  "--allow-runtime-loading", "--max-context", 256)
    servers.append(swap)

    def answer(model):
        r = swap.client.completions.create(model=model, prompt="Hello", max_tokens=12, temperature=0, logprobs=0)
        return r.choices[0].text, r.choices[0].logprobs.token_logprobs

    ft2 = answer("ft2")
    old_ft1 = answer("ft1")  # ft1 is the resident model now
    check(old_ft1[0] != ft2[0], "ft1 and ft2 answer alike: the reload check would prove nothing")
    check(swap.request("POST", "/v1/unload_delta", {"name": "ft1"})[0] == 200, "swap: unload ft1")
    status, _ = swap.request("POST", "/v1/load_delta", {"name": "ft1", "path": "ft2.h5"})
    check(status == 200, f"swap: load ft1 from ft2.h5: {status}")
    new_ft1 = answer("ft1")
    check(new_ft1[0] == ft2[0] and all(abs(a - b) <= 1e-5 for a, b in zip(new_ft1[1], ft2[1])),
          f"swap mode served the old weights under a reloaded name: {new_ft1[0]!r}, ft2's {ft2[0]!r}, "
          f"the old ft1's {old_ft1[0]!r}")


def start_long_request(server, max_tokens, result):
    """Starts a greedy completion of `max_tokens` from "go" on a thread, fills
    `result` (status and body, or the error) when it ends, and waits until the
    server runs it; returns the thread."""
    def go():
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
        try:
            conn.request("POST", "/v1/completions", json.dumps({"model": "small", "prompt": "go",
                                                                "max_tokens": max_tokens, "temperature": 0}),
                         {"Content-Type": "application/json"})
            resp = conn.getresponse()
            result["status"], result["body"] = resp.status, json.loads(resp.read())
        except (OSError, http.client.HTTPException, ValueError) as e:
            result["error"] = repr(e)
    t = threading.Thread(target=go)
    t.start()
    for _ in range(600):
        if server.sample("dz_running_sequences") >= 1:
            break
        time.sleep(0.05)
    return t


def check_shutdown_limits(tmp, servers):
    """--shutdown-timeout ends the requests still in flight with an error, and the
    server exits 0; a second signal exits at once (143) whatever is in flight."""
    # A deadline of 0: the 900-token request is ended as soon as the signal is seen.
    ended = Server(tmp, "deadline", "--base", tmp / "small", "--max-batch", 1, "--max-context", 1000,
                   "--shutdown-timeout", 0)
    servers.append(ended)
    result = {}
    t = start_long_request(ended, 900, result)
    ended.proc.send_signal(signal.SIGTERM)
    t.join(timeout=300)
    check(result.get("status") == 503 and "--shutdown-timeout" in result["body"]["error"]["message"],
          f"a request in flight at the shutdown deadline: {str(result)[:300]}")
    check(ended.proc.wait(timeout=120) == 0, "server did not exit 0 after its shutdown deadline")

    # A second signal during the drain: exit now, with 128 + SIGTERM.
    twice = Server(tmp, "twice", "--base", tmp / "small", "--max-batch", 1, "--max-context", 1000)
    servers.append(twice)
    result = {}
    t = start_long_request(twice, 900, result)
    twice.proc.send_signal(signal.SIGTERM)
    for _ in range(600):  # draining: /health says so
        if twice.request("GET", "/health")[0] == 503:
            break
        time.sleep(0.02)
    twice.proc.send_signal(signal.SIGTERM)
    check(twice.proc.wait(timeout=120) == 128 + signal.SIGTERM, f"second signal: exit {twice.proc.returncode}")
    t.join(timeout=300)
    check("status" not in result, f"the request in flight completed after a second signal: {str(result)[:200]}")


def check_untied_head(tmp, servers):
    """An untied LM head is compressed like any linear layer (inspect lists it
    packed, as its own class); served from its delta, the variant answers as its
    reconstruction served alone."""
    config = json.loads((tmp / "base" / "config.json").read_text())
    config["tie_word_embeddings"] = False
    (tmp / "untied-config.json").write_text(json.dumps(config))
    run(BIN / "sailor-run", "-q", "init", "--config", tmp / "untied-config.json", "--seed", "5", "-o", tmp / "untied")
    make_fine_tune(tmp / "untied", tmp / "untied-ft", 13)
    run(BIN / "dz-compress", "-q", "compress", "--base", tmp / "untied", "--target", tmp / "untied-ft", "-o",
        tmp / "untied.h5", "--bits", 4, "--sparsity", "2:4", "--calib-samples", 8, "--threads", "1")
    info = json.loads(subprocess.run([str(BIN / "dz-compress"), "inspect", str(tmp / "untied.h5"), "--json"],
                                     check=True, capture_output=True, text=True).stdout)
    head = [t for t in info["tensors"] if t["name"] == "lm_head.weight"]
    check(len(head) == 1 and head[0]["kind"] == "4-bit 2:4", f"untied head stored as {head}")
    check(info["classes"]["LM head"]["bits_per_weight"] < 4, f"LM head class {info['classes'].get('LM head')}")
    run(BIN / "dz-compress", "-q", "decompress", tmp / "untied.h5", "--base", tmp / "untied", "-o", tmp / "untied-rec")
    delta = Server(tmp, "untied", "--base", tmp / "untied", "--delta", f"uft={tmp / 'untied.h5'}", "--max-context", 256)
    servers.append(delta)
    alone = Server(tmp, "untied-rec", "--base", tmp / "untied-rec", "--max-context", 256)
    servers.append(alone)
    prompts = ["The weather today", "copy: abc =", "Hello", [1, 60, 61, 62, 63]]
    served = [greedy(delta, "uft", p)[0] for p in prompts]
    check(served == [greedy(alone, "untied-rec", p)[0] for p in prompts],
          "an untied variant served from its delta differs from its reconstruction")
    check(sum(a != greedy(delta, "untied", p)[0] for a, p in zip(served, prompts)) >= 2,
          "the untied variant answers like its base: the comparison would prove nothing")


def main():
    tmp = Path(tempfile.mkdtemp(prefix="dz-serve-test-"))
    servers = []
    try:
        run(BIN / "sailor-run", "-q", "init", "--preset", "tiny", "--seed", "1", "-o", tmp / "base")
        # A chat template of our own in the base's tokenizer_config.json (not part of the base identity).
        config = json.loads((tmp / "base" / "tokenizer_config.json").read_text())
        config["chat_template"] = ("{% for m in messages %}{{ '<|' + m['role'] + '|>' }}{{ m['content'] | trim }}\n"
                                   "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")
        (tmp / "base" / "tokenizer_config.json").write_text(json.dumps(config))
        make_fine_tune(tmp / "base", tmp / "ft1", 11)
        make_fine_tune(tmp / "base", tmp / "ft2", 12)
        run(BIN / "sailor-run", "-q", "init", "--preset", "tiny", "--seed", "2", "-o", tmp / "other")
        for name, bits, base in (("ft1", 4, "base"), ("ft2", 2, "base"), ("foreign", 4, "other")):
            target = "ft1" if name == "foreign" else name
            run(BIN / "dz-compress", "-q", "compress", "--base", tmp / base, "--target", tmp / target, "-o",
                tmp / f"{name}.h5", "--bits", bits, "--sparsity", "2:4", "--method", "rtn", "--threads", "1")
        run(BIN / "dz-compress", "-q", "decompress", tmp / "ft1.h5", "--base", tmp / "base", "-o", tmp / "ft1-rec")

        (tmp / "deltas").mkdir()  # served by folder: variants named after the files
        (tmp / "deltas" / "later").mkdir()  # not served at start (not recursive); loadable at run time
        shutil.copy(tmp / "foreign.h5", tmp / "deltas" / "later" / "foreign.h5")
        shutil.copy(tmp / "ft1.h5", tmp / "deltas" / "later" / "ft1.h5")
        for name in ("ft1", "ft2"):
            shutil.copy(tmp / f"{name}.h5", tmp / "deltas" / f"{name}.h5")
        main_server = Server(tmp, "delta", "--base", tmp / "base", "--delta-dir", tmp / "deltas",
                             "--allow-runtime-loading", "--max-batch", 8,
                             "--max-tokens-per-step", 32, "--max-context", 256, "--max-body", 65536)
        servers.append(main_server)
        reference = Server(tmp, "reference", "--base", tmp / "ft1-rec", "--max-context", 256)
        servers.append(reference)
        s = main_server

        # Models list.
        ids = sorted(m.id for m in s.client.models.list().data)
        check(ids == ["base", "ft1", "ft2"], f"models list {ids}")
        one = s.client.models.retrieve("ft1")
        check(one.id == "ft1" and getattr(one, "parent", None) == "base", f"retrieve ft1: {one}")
        try:
            s.client.models.retrieve("nope")
            check(False, "retrieving an unknown model succeeded")
        except openai.NotFoundError:
            pass

        # Greedy text of a variant served from its delta = its reconstruction served alone,
        # also while the other variants run in the same batches.
        prompts = ["The weather today", "copy: abc =", "A list of colours:", "Hello", [1, 60, 61, 62, 63]]
        expected = {str(p): greedy(reference, "ft1-rec", p)[0] for p in prompts}
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            jobs = [(m, p, pool.submit(greedy, s, m, p)) for p in prompts for m in ("ft1", "ft2", "base", "ft1")]
            answers = {(m, str(p)): f.result()[0] for m, p, f in jobs}
        for p in prompts:
            check(answers[("ft1", str(p))] == expected[str(p)],
                  f"ft1 on {p!r}: {answers[('ft1', str(p))]!r} != reconstruction {expected[str(p)]!r}")
        distinct = sum(answers[("ft1", str(p))] != answers[("base", str(p))] for p in prompts)
        check(distinct >= 3, "ft1 answers like the base: the comparison would prove nothing")
        check(any(answers[("ft2", str(p))] != answers[("ft1", str(p))] for p in prompts), "ft2 answers like ft1")

        # Usage counts, stop strings, streaming = non-streaming.
        r = s.client.completions.create(model="ft1", prompt=[1, 60, 61, 62, 63], max_tokens=10, temperature=0)
        check(r.usage.prompt_tokens == 5 and r.usage.completion_tokens == 10 and r.usage.total_tokens == 15,
              f"usage {r.usage}")
        full_text = r.choices[0].text
        streamed = s.client.completions.create(model="ft1", prompt=[1, 60, 61, 62, 63], max_tokens=10, temperature=0,
                                               stream=True, stream_options={"include_usage": True})
        pieces, usage = [], None
        for chunk in streamed:
            if chunk.choices:
                pieces.append(chunk.choices[0].text)
            if chunk.usage:
                usage = chunk.usage
        check("".join(pieces) == full_text, f"stream {''.join(pieces)!r} != {full_text!r}")
        check(usage is not None and usage.completion_tokens == 10, f"stream usage {usage}")
        if len(full_text) > 4:
            stop = full_text[2:4]
            r = s.client.completions.create(model="ft1", prompt=[1, 60, 61, 62, 63], max_tokens=10, temperature=0,
                                            stop=[stop])
            check(r.choices[0].text == full_text[:full_text.find(stop)] and r.choices[0].finish_reason == "stop",
                  f"stop {stop!r}: {r.choices[0].text!r}")

        # Chat, plain and streamed; sampling with a seed repeats.
        chat = s.client.chat.completions.create(model="ft2", messages=[{"role": "user", "content": "Hi"}],
                                                max_tokens=8, temperature=0)
        check(chat.choices[0].message.role == "assistant" and chat.usage.completion_tokens >= 1, f"chat {chat}")
        # The prompt is the model's own chat template, tokenized as transformers does it.
        from transformers import PreTrainedTokenizerFast
        reference_ids = PreTrainedTokenizerFast.from_pretrained(str(tmp / "base")).apply_chat_template(
            [{"role": "user", "content": "Hi"}], add_generation_prompt=True)
        check(chat.usage.prompt_tokens == len(reference_ids),
              f"chat prompt: {chat.usage.prompt_tokens} tokens, transformers' apply_chat_template {len(reference_ids)}")
        stream = s.client.chat.completions.create(model="ft2", messages=[{"role": "user", "content": "Hi"}],
                                                  max_tokens=8, temperature=0, stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        check(text == chat.choices[0].message.content, f"chat stream {text!r} != {chat.choices[0].message.content!r}")
        # A chat without a limit runs to its end-of-sequence token or the end of the context (256 here), not 16.
        free = s.client.chat.completions.create(model="ft2", messages=[{"role": "user", "content": "Hi"}], temperature=0)
        u = free.usage
        check((u.completion_tokens > 16 or free.choices[0].finish_reason == "stop") and u.total_tokens <= 256 and
              (free.choices[0].finish_reason == "stop" or u.total_tokens == 256), f"chat without max_tokens: {u}")
        a = s.client.completions.create(model="base", prompt="x", max_tokens=12, temperature=0.9, top_p=0.9, seed=5)
        b = s.client.completions.create(model="base", prompt="x", max_tokens=12, temperature=0.9, top_p=0.9, seed=5)
        check(a.choices[0].text == b.choices[0].text, "same seed, different samples")

        # Penalties and logit bias against transformers' model of the same folder, driven greedily
        # step by step with OpenAI's rule: logit + bias - frequency x count - presence x (count > 0),
        # counting the tokens generated so far. A step whose two best adjusted logits are within
        # 1e-3 could go either way with other rounding: the comparison stops before it.
        from transformers import LlamaForCausalLM
        hf = LlamaForCausalLM.from_pretrained(str(tmp / "base"), torch_dtype=torch.float32).eval()
        prompt_ids, bias = [1, 60, 61, 62, 63], {70: 4.0, 71: -100.0}
        frequency, presence = 1.5, 0.5
        ids, counts, decided = list(prompt_ids), {}, 0
        with torch.no_grad():
            for _ in range(12):
                logits = hf(torch.tensor([ids])).logits[0, -1].clone()
                for t, b in bias.items():
                    logits[t] += b
                for t, c in counts.items():
                    logits[t] -= frequency * c + presence
                top2 = torch.topk(logits, 2).values
                if decided == len(ids) - len(prompt_ids) and top2[0] - top2[1] >= 1e-3:
                    decided += 1
                token = int(torch.argmax(logits))
                counts[token] = counts.get(token, 0) + 1
                ids.append(token)
        r = s.client.completions.create(model="base", prompt=prompt_ids, max_tokens=12, temperature=0,
                                        frequency_penalty=frequency, presence_penalty=presence,
                                        logit_bias={str(t): b for t, b in bias.items()})
        plain = s.client.completions.create(model="base", prompt=prompt_ids, max_tokens=12, temperature=0)
        tokenizer = PreTrainedTokenizerFast.from_pretrained(str(tmp / "base"))
        want = tokenizer.decode(ids[len(prompt_ids):len(prompt_ids) + decided], skip_special_tokens=True)
        check(decided >= 4 and r.choices[0].text.startswith(want),
              f"penalised greedy {r.choices[0].text!r}, transformers {want!r} ({decided} decided steps)")
        check(r.choices[0].text != plain.choices[0].text, "penalties and bias changed nothing: the check proves nothing")

        # Log-probabilities: transformers' log-softmax along the greedy path, step by step
        # while the best token is clear; streamed as the reply is.
        asked = dict(model="base", messages=[{"role": "user", "content": "Hi"}], max_tokens=8, temperature=0,
                     logprobs=True, top_logprobs=3)
        reply = s.client.chat.completions.create(**asked)
        ids, compared, worst = list(reference_ids), 0, 0.0
        with torch.no_grad():
            for entry in reply.choices[0].logprobs.content:
                logprobs = torch.log_softmax(hf(torch.tensor([ids])).logits[0, -1].double(), -1)
                best = torch.topk(logprobs, 3)
                if best.values[0] - best.values[1] < 1e-3:
                    break
                got = [entry.logprob] + [t.logprob for t in entry.top_logprobs]
                want = [float(best.values[0])] + [float(v) for v in best.values]
                worst = max([worst] + [abs(a - b) for a, b in zip(got, want)] + [float(len(got) != 4)])
                compared += 1
                ids.append(int(best.indices[0]))
        check(compared >= 4 and worst < 1e-3, f"chat logprobs against transformers: {compared} steps, "
              f"largest difference {worst:.2e}")
        streamed = [t for c in s.client.chat.completions.create(**asked, stream=True)
                    if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content]
        check([t.logprob for t in streamed] == [t.logprob for t in reply.choices[0].logprobs.content],
              "streamed logprobs differ from the reply's")
        # Scoring a prompt as evaluation harnesses do (echo, max_tokens 0, logprobs 1): each
        # token after the first against transformers' log-softmax of the positions before it.
        # 40 tokens: prefilled in two chunks of --max-tokens-per-step 32.
        scored_ids = [1] + [4 + b for b in b"The quick brown fox jumps over the lazy dog"][:39]
        scored = s.client.completions.create(model="ft1", prompt=scored_ids, max_tokens=0, temperature=0, logprobs=1,
                                             echo=True)
        with torch.no_grad():
            ft1_rec = LlamaForCausalLM.from_pretrained(str(tmp / "ft1-rec"), torch_dtype=torch.float32).eval()
            want = torch.log_softmax(ft1_rec(torch.tensor([scored_ids])).logits[0].double(), -1)
        got = scored.choices[0].logprobs.token_logprobs
        worst = max(abs(got[t] - float(want[t - 1, scored_ids[t]])) for t in range(1, len(scored_ids))) \
            if len(got) == len(scored_ids) and got[0] is None else float("inf")
        check(worst < 1e-3 and scored.usage.completion_tokens == 0 and
              scored.choices[0].text == tokenizer.decode(scored_ids),
              f"echo scoring of ft1 (served from its delta) against transformers on its reconstruction: "
              f"largest difference {worst:.2e}, usage {scored.usage}, text {scored.choices[0].text!r}")
        echoed = s.client.completions.create(model="base", prompt="Hello", max_tokens=3, temperature=0, echo=True)
        check(echoed.choices[0].text.startswith("Hello") and echoed.usage.completion_tokens >= 1,
              f"echo without logprobs: {echoed.choices[0].text!r}")
        legacy = s.client.completions.create(model="base", prompt=prompt_ids, max_tokens=4, temperature=0, logprobs=2)
        lp = legacy.choices[0].logprobs
        check(len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 4 and
              all(max(t.values()) >= v - 1e-6 for t, v in zip(lp.top_logprobs, lp.token_logprobs)),
              f"completion logprobs: {lp}")

        check_choices(s)

        # Bad requests: 4xx in OpenAI's shape, and the server keeps serving.
        bad = [
            ("POST", "/v1/completions", None, b"{not json", 400),
            # Not UTF-8: refused, and the error (which quotes what the parser read) still is.
            ("POST", "/v1/completions", None, b'{"model": "ft1", "prompt": "\xff\xfe", "max_tokens": 2}', 400),
            ("POST", "/v1/chat/completions", None, b'{"model": "ft1", "messages": [{"role": "user", "content": "\xc3"}]}', 400),
            ("POST", "/v1/completions", {"model": "nope", "prompt": "x"}, None, 404),
            ("POST", "/v1/completions", {"model": "ft1", "prompt": "x", "max_tokens": 0}, None, 400),
            ("POST", "/v1/completions", {"model": "ft1", "prompt": "x", "logit_bias": {"999999": 5}}, None, 400),
            ("POST", "/v1/chat/completions", {"model": "ft1", "messages": [{"role": "user", "content": "x"}],
                                              "tools": [{"type": "function", "function": {"name": "f"}}]}, None, 400),
            ("POST", "/v1/completions", {"model": "ft1", "prompt": "x", "max_tokens": 100000}, None, 400),
            # Over the context: 400 with code context_length_exceeded (OpenAI's, vLLM's), not 413.
            ("POST", "/v1/completions", {"model": "ft1", "prompt": "y" * 400}, None, 400),
            # An unknown model is named first, whatever else is wrong (OpenAI: 404 model_not_found).
            ("POST", "/v1/completions", {"model": "nope", "prompt": "y" * 400}, None, 404),
            # stream_options without stream: OpenAI refuses it.
            ("POST", "/v1/completions", {"model": "ft1", "prompt": "x", "stream_options": {"include_usage": True}},
             None, 400),
            # vLLM's sampling extensions this server does not implement: refused, never ignored.
            ("POST", "/v1/completions", {"model": "ft1", "prompt": "x", "top_k": 5}, None, 400),
            ("POST", "/v1/completions", {"model": "ft1", "prompt": "x", "min_p": 0.1}, None, 400),
            ("POST", "/v1/completions", {"model": "ft1", "prompt": "x", "repetition_penalty": 1.2}, None, 400),
            ("POST", "/v1/chat/completions", {"model": "ft1", "messages": [{"role": "user", "content": "x"}],
                                              "ignore_eos": True}, None, 400),
            # The generation endpoints are POST only: 405, as OpenAI's and vLLM's servers answer.
            ("GET", "/v1/completions", None, None, 405),
            ("GET", "/v1/chat/completions", None, None, 405),
            ("POST", "/v1/completions", {"model": "ft1", "prompt": "y" * 70000}, None, 413),
            ("POST", "/v1/chat/completions", {"model": "ft1", "messages": "hi"}, None, 400),
            ("POST", "/v1/load_delta", {"name": "x", "path": "later/foreign.h5"}, None, 400),
            ("POST", "/v1/load_delta", {"name": "x", "path": "missing.h5"}, None, 400),
            ("POST", "/v1/load_delta", {"name": "x", "path": str(tmp / "base" / "config.json")}, None, 400),
            ("POST", "/v1/unload_delta", {"name": "never"}, None, 404),
            ("GET", "/v1/nothing", None, None, 404),
        ]
        for method, path, body, raw, want in bad:
            status, reply = s.request(method, path, body, raw)
            shape = isinstance(reply, dict) and isinstance(reply.get("error"), dict) and "message" in reply["error"]
            # error.code is a string or null, never the status (OpenAI's shape).
            shape = shape and (reply["error"].get("code") is None or isinstance(reply["error"]["code"], str))
            check(status == want and shape, f"{method} {path} {str(body)[:60]}: {status} {str(reply)[:200]}")
        codes = {(str(b)[:40], want): s.request(m, pth, b, r)[1]["error"]["code"] for m, pth, b, r, want in bad
                 if b is not None and want in (400, 404) and "y" * 400 in str(b)}
        check(sorted(codes.values()) == ["context_length_exceeded", "model_not_found"],
              f"error codes of an over-long prompt for a known and an unknown model: {codes}")
        # No silently accepted defaults either: the off values of the vLLM extensions are fine.
        check(s.request("POST", "/v1/completions", {"model": "ft1", "prompt": "x", "max_tokens": 2, "top_k": -1,
                                                    "min_p": 0, "repetition_penalty": 1, "ignore_eos": False})[0]
              == 200, "vLLM extensions at their off values")
        # /v1/models gives each model's context (vLLM's max_model_len).
        check(all(m["max_model_len"] == 256 for m in s.request("GET", "/v1/models")[1]["data"]),
              "max_model_len in /v1/models")
        # A stream with include_usage: every chunk but the usage one carries "usage": null.
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=120)
        conn.request("POST", "/v1/completions", json.dumps({"model": "ft1", "prompt": "Hello", "max_tokens": 4,
                                                            "stream": True, "stream_options": {"include_usage": True}}),
                     {"Content-Type": "application/json"})
        events = [json.loads(line[6:]) for line in conn.getresponse().read().decode().splitlines()
                  if line.startswith("data: {")]
        conn.close()
        check(len(events) >= 2 and all("usage" in e and e["usage"] is None for e in events[:-1]) and
              events[-1]["usage"]["completion_tokens"] >= 1, f"usage in stream chunks: {events}")
        with socket.create_connection(("127.0.0.1", s.port)) as sock:  # garbage instead of HTTP
            sock.sendall(b"\x00\x01GARBAGE / HTTP/9\r\n\r\n")
            sock.settimeout(10)
            answer = b""
            try:
                while b"}}" not in answer:
                    part = sock.recv(4096)
                    if not part:
                        break
                    answer += part
            except OSError:
                pass
            check(answer.startswith(b"HTTP/1.1 400") and b"malformed HTTP request" in answer,
                  f"garbage instead of HTTP: {answer[:300]!r}")
        check(s.request("GET", "/health")[0] == 200, "server unhealthy after bad requests")
        # Every refused request counts, those refused while parsing too.
        n400 = sum(1 for _, path, _, _, want in bad if want == 400 and path in ("/v1/completions", "/v1/chat/completions"))
        check(s.sample("dz_requests_rejected", {"status": "400"}, "_total") >= n400,
              f"400s counted: {s.sample('dz_requests_rejected', {'status': '400'}, '_total')} of at least {n400}")
        # Counters that never moved still export their 0.
        text = s.request("GET", "/metrics", raw_reply=True)[1]
        for series in ("dz_model_swaps_total 0", "dz_delta_evictions_total 0"):
            check(series in text.splitlines(), f"{series} not exported")

        # Variants added and removed at run time.
        status, _ = s.request("POST", "/v1/load_delta", {"name": "ft1-again", "path": "later/ft1.h5"})
        check(status == 200, f"load_delta {status}")
        check(greedy(s, "ft1-again", "Hello")[0] == expected["Hello"], "a variant loaded at run time answers otherwise")
        check(s.request("POST", "/v1/unload_delta", {"name": "ft1-again"})[0] == 200, "unload_delta")
        check(s.request("POST", "/v1/completions", {"model": "ft1-again", "prompt": "x"})[0] == 404, "unloaded still served")

        # 64 concurrent clients for a bounded number of requests: none fails.
        def client_loop(i):
            ok = 0
            for j in range(3):
                model = ("ft1", "ft2", "base")[(i + j) % 3]
                r = s.client.completions.create(model=model, prompt=f"client {i} request {j}", max_tokens=6,
                                                temperature=0.7, seed=i * 10 + j)
                # A sampled reply may end at once with end-of-sequence (no text): still a success.
                ok += r.choices[0].finish_reason in ("stop", "length") and r.usage.completion_tokens <= 6
            return ok
        with concurrent.futures.ThreadPoolExecutor(64) as pool:
            results = list(pool.map(client_loop, range(64)))
        check(sum(results) == 192, f"{192 - sum(results)} of 192 concurrent requests failed")

        # Metrics, parsed by prometheus_client.
        m = s.metrics()
        for family in ("dz_requests", "dz_generated_tokens", "dz_queue_length", "dz_batch_size", "dz_step_seconds",
                       "dz_time_to_first_token_seconds", "dz_request_latency_seconds", "dz_delta_loads",
                       "dz_delta_hits", "dz_delta_evictions", "dz_resident_bytes"):
            check(family in m, f"metric {family} missing")
        check(s.sample("dz_requests", {"model": "ft1"}, "_total") >= 10, "requests of ft1 not counted")
        # vLLM's names and labels for what dashboards and routers read.
        m = s.metrics()
        for family in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:request_success",
                       "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:time_to_first_token_seconds",
                       "vllm:e2e_request_latency_seconds", "vllm:lora_requests_info"):
            check(family in m, f"metric {family} missing")
        check(s.sample("vllm:request_success", {"model_name": "base", "finished_reason": "length"}, "_total") >= 1 and
              s.sample("vllm:prompt_tokens", {"model_name": "base"}, "_total") > 0 and
              s.sample("vllm:time_to_first_token_seconds", {"model_name": "base"}, "_count") > 0 and
              s.sample("vllm:num_requests_running", {"model_name": "base"}) == 0,
              "vLLM-named samples")
        lora = [x for x in m["vllm:lora_requests_info"].samples]
        check(len(lora) == 1 and set(lora[0].labels) == {"running_lora_adapters", "waiting_lora_adapters", "max_lora"}
              and lora[0].labels["max_lora"] == "4",  # the default --max-variants-per-batch
              f"vllm:lora_requests_info: one series, now: {lora}")
        check(s.sample("dz_batch_size", suffix="_count") > 0, "batch size histogram empty")
        check(s.sample("dz_resident_bytes", {"part": "deltas"}) > 0, "resident delta bytes not reported")
        check(max(s.sample("dz_batch_size", {"le": le}, "_bucket") for le in ("1.0",)) <
              s.sample("dz_batch_size", suffix="_count"), "no step ever batched several sequences")

        check_llama3_style(tmp, servers)
        check_untied_head(tmp, servers)
        check_swap_reload(tmp, servers)
        check_access(tmp, servers)
        check_stalled_clients(tmp, servers)
        check_client_limits(tmp, servers)

        # A small model that decodes slowly enough to interrupt: disconnect, then SIGTERM.
        run(BIN / "sailor-run", "-q", "init", "--preset", "small", "--seed", "3", "-o", tmp / "small")
        slow = Server(tmp, "slow", "--base", tmp / "small", "--max-batch", 1, "--max-queue", 1, "--max-context", 1000)

        # Queue full: one running, one waiting, the rest 429 at once. Greedy
        # from "go" reaches no end-of-sequence token within 200 tokens, so the
        # running request lasts as long as its max_tokens (a sampled one may
        # stop after a few tokens, before the others arrive).
        def burst(i):
            return slow.request("POST", "/v1/completions", {"model": "small", "prompt": "go", "max_tokens": 200,
                                                            "temperature": 0})
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            statuses = sorted(status for status, _ in pool.map(burst, range(8)))
        check(statuses.count(200) >= 1 and statuses.count(429) >= 1 and set(statuses) <= {200, 429},
              f"burst into a queue of one: {statuses}")
        servers.append(slow)
        conn = http.client.HTTPConnection("127.0.0.1", slow.port, timeout=60)
        conn.request("POST", "/v1/completions", json.dumps({"model": "small", "prompt": "go", "max_tokens": 900,
                                                            "temperature": 0, "stream": True}),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.fp.readline()  # the first event
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        for _ in range(300):
            if slow.sample("dz_requests_finished", {"reason": "cancelled"}, "_total") >= 1:
                break
            time.sleep(0.1)
        check(slow.sample("dz_requests_finished", {"reason": "cancelled"}, "_total") == 1,
              "a client that went away mid-stream was not cancelled")
        check(slow.sample("dz_running_sequences") == 0, "the disconnected stream still holds its slot")

        result = {}
        t = start_long_request(slow, 200, result)
        slow.proc.send_signal(signal.SIGTERM)
        # Once /health says it is shutting down (a state, not a time), new work is refused.
        for _ in range(600):
            try:
                if slow.request("GET", "/health")[0] == 503:
                    break
            except OSError:
                break
            time.sleep(0.02)
        try:
            status, reply = slow.request("POST", "/v1/completions", {"model": "small", "prompt": "late"})
            check(status == 503, f"request after SIGTERM: {status} {reply}")
        except OSError:
            pass  # already closed: also a refusal
        t.join(timeout=300)
        check(result.get("status") == 200 and result["body"]["usage"]["completion_tokens"] == 200,
              f"in-flight request after SIGTERM: {str(result)[:200]}")
        check(slow.proc.wait(timeout=120) == 0, "server did not exit 0 after SIGTERM")
        check_shutdown_limits(tmp, servers)
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("dz-serve: all checks passed")


main()
