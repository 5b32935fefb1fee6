"""Chat templates rendered by our Jinja subset against jinja2 itself, set up
the way transformers' apply_chat_template sets it up (trim_blocks,
lstrip_blocks, raise_exception, the messages, add_generation_prompt,
bos_token, eos_token). The templates are written here in the styles model
families use: [INST] blocks with a folded system prompt, header tokens per
role, ChatML, role tags with end-of-turn tokens, namespaces, slices, loop
variables, filters and whitespace control.

Usage: check_chat_templates.py TOKENIZER_HELPER
"""
import datetime
import json
import os
import subprocess
import sys
import tempfile

try:
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError as e:
    print(f"SKIP: {e}; run scripts/install-deps.sh")
    sys.exit(77)

TEMPLATES = {
    "inst": (
        "{% if messages[0]['role'] == 'system' %}{% set sys = messages[0]['content'] %}"
        "{% set rest = messages[1:] %}{% else %}{% set sys = false %}{% set rest = messages %}{% endif %}"
        "{% for message in rest %}"
        "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
        "{% if loop.index0 == 0 and sys != false %}{% set content = '<<SYS>>\\n' + sys + '\\n<</SYS>>\\n\\n' + message['content'] %}"
        "{% else %}{% set content = message['content'] %}{% endif %}"
        "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
        "{% elif message['role'] == 'assistant' %}{{ ' ' + content.strip() + ' ' + eos_token }}{% endif %}"
        "{% endfor %}"
    ),
    "headers": (
        "{{- bos_token }}\n"
        "{%- for message in messages %}\n"
        "    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}\n"
        "{%- endfor %}\n"
        "{%- if add_generation_prompt %}\n"
        "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
        "{%- endif %}\n"
    ),
    "chatml": (
        "{% for message in messages %}\n"
        "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are helpful.<|im_end|>\n{% endif %}"
        "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
        "{% endfor %}\n"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    ),
    "tags": (
        "{% for message in messages %}\n"
        "{% if message['role'] == 'user' %}\n"
        "{{ '<|user|>\\n' + message['content'] + eos_token }}\n"
        "{% elif message['role'] == 'system' %}\n"
        "{{ '<|system|>\\n' + message['content'] + eos_token }}\n"
        "{% elif message['role'] == 'assistant' %}\n"
        "{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\n"
        "{% endif %}\n"
        "{% if loop.last and add_generation_prompt %}\n"
        "{{ '<|assistant|>' }}\n"
        "{% endif %}\n"
        "{% endfor %}"
    ),
    "namespace": (
        "{%- set ns = namespace(system='', turns=0) -%}\n"
        "{%- for m in messages -%}\n"
        "  {%- if m.role == 'system' -%}{%- set ns.system = ns.system ~ m.content -%}\n"
        "  {%- else -%}{%- set ns.turns = ns.turns + 1 -%}{%- endif -%}\n"
        "{%- endfor -%}\n"
        "{%- if ns.system %}System: {{ ns.system | upper }}\n{% endif -%}\n"
        "{%- for m in messages if m.role != 'system' -%}\n"
        "{{ loop.index }}/{{ loop.length }} {{ m.role | capitalize }}: {{ m.content }}{{ '\\n' if not loop.last }}\n"
        "{%- endfor %}\n"
        "{{ 'turns=' ~ ns.turns ~ ' even=' ~ (ns.turns is even) ~ ' keys=' ~ (messages[0] | length) ~ ' last=' ~ messages[-1].content[:5] }}"
    ),
    # Selection by attribute before the turns, as in templates of the [INST]
    # family that skip tool messages when checking the alternation.
    "selected": (
        "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}"
        "{%- set loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}{%- endif %}\n"
        "{%- set user_messages = loop_messages | selectattr('role', 'equalto', 'user') | list %}\n"
        "{%- for message in loop_messages | rejectattr('role', 'equalto', 'tool') | selectattr('tool_calls', 'undefined') %}\n"
        "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
        "        {{- raise_exception('After the optional system message, conversation roles must alternate') }}\n"
        "    {%- endif %}\n"
        "{%- endfor %}\n"
        "{{- bos_token }}\n"
        "{%- for message in loop_messages %}\n"
        "    {%- if message['role'] == 'user' %}\n"
        "        {%- if loop.last and system_message is defined %}"
        "{{- '[INST] ' + system_message + '\\n\\n' + message['content'] + '[/INST]' }}\n"
        "        {%- else %}{{- '[INST] ' + message['content'] + '[/INST]' }}{%- endif %}\n"
        "    {%- elif message['role'] == 'assistant' %}{{- ' ' + message['content'] | trim + eos_token }}\n"
        "    {%- endif %}\n"
        "{%- endfor %}\n"
        "{{- '|' ~ user_messages | length ~ '|' ~ messages | map(attribute='role') | join(',') }}"
        "{{- '|' ~ messages | map(attribute='name', default='-') | join(',') }}"
        "{{- '|' ~ messages | map(attribute='content') | map('length') | select('odd') | list | length }}"
        "{{- '|' ~ messages | rejectattr('content') | list | length ~ '|' ~ [1, 0, 2] | select | list | tojson }}"
        "{{- '|' ~ {'content': messages[-1].content, 'role': messages[-1].role} | tojson ~ '|' ~ [{'a': 1, 'b': [true, none, 2.5]}, []] | tojson(indent=2) }}"
        "{{- '|' ~ {'a': 'é', 'b': [1, {'c': none}]} | tojson }}"
        "{{- '|' ~ ['x', 'y'] | reject('in', 'xz') | list | tojson ~ ' ' ~ (messages | selectattr('role', 'ne', 'user') | list | length) }}"
    ),
    # Today's date in the system prompt, as Llama 3.2's template writes it.
    "dated": (
        "{{- bos_token }}\n"
        "{%- if not date_string is defined %}\n"
        "    {%- if strftime_now is defined %}{%- set date_string = strftime_now('%d %b %Y') %}\n"
        "    {%- else %}{%- set date_string = '26 Jul 2024' %}{%- endif %}\n"
        "{%- endif %}\n"
        "{{- '<|start_header_id|>system<|end_header_id|>\\n\\nToday Date: ' + date_string + '<|eot_id|>' }}\n"
        "{%- for message in messages %}{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content + '<|eot_id|>' }}{%- endfor %}\n"
        "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
    ),
    "misc": (
        "{# a comment #}{% set roles = {'user': 'Q', 'assistant': 'A'} %}"
        "{% for m in messages %}{{ roles.get(m.role, 'S') }}{{ ': ' }}"
        "{{ m.content.replace('\\n', ' ') if m.content is string else m.content | tojson }}"
        "{% if m.content.startswith('Hello') %} (greeting){% endif %}"
        "{{ ' | ' if not loop.last else '' }}{% endfor %}"
        "{% if add_generation_prompt is defined and add_generation_prompt %} A:{% endif %}"
        "{% for i in range(3) %}{{ i * 2 + 1 }}{% if i < 2 %},{% endif %}{% endfor %}"
        " {{ 7 // 2 }} {{ 7 % 3 }} {{ -3 // 2 }} {{ 1.5 * 2 }} {{ 'x' in 'xyz' }} {{ 'q' not in ['a'] }}"
        " {{ none is none }} {{ [1, 2] + [3] }} {{ undefined_thing | default('dflt') }} {{ messages | map_missing is defined }}"
    ),
}

CONVERSATIONS = [
    [{"role": "user", "content": "Hello there"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " What is 2+2? "},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?\nThanks"}],
    [{"role": "user", "content": "first"}, {"role": "user", "content": "second"}],  # breaks alternation
    [{"role": "user", "content": ""}, {"role": "assistant", "content": "<b>&'x'"}],
]


def reference(template, variables):
    # What transformers does in apply_chat_template (4.44; strftime_now since 4.45).
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)
    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    env.filters["tojson"] = tojson  # transformers replaces Jinja's (which escapes HTML and sorts keys)
    try:
        return env.from_string(template).render(**variables)
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e)}


cases = []
for name, template in TEMPLATES.items():
    if name == "misc":
        template = template.replace(" {{ messages | map_missing is defined }}", "")
    for conversation in CONVERSATIONS:
        for generation in (True, False):
            cases.append({"name": name, "template": template,
                          "variables": {"messages": conversation, "add_generation_prompt": generation,
                                        "bos_token": "<s>", "eos_token": "</s>"}})
with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
    json.dump(cases, f)
# Rendered again if the date changed meanwhile ("dated" prints today's date).
try:
    for attempt in range(2):
        day = datetime.date.today()
        ours = json.loads(subprocess.run([sys.argv[1], "--chat", f.name], check=True, capture_output=True,
                                         text=True).stdout)
        if datetime.date.today() == day:
            break
finally:
    os.unlink(f.name)
failures = 0
for case, got in zip(cases, ours):
    want = reference(case["template"], case["variables"])
    same = (isinstance(want, dict) and isinstance(got, dict)) or want == got
    if not same:
        failures += 1
        print(f"FAIL {case['name']} ({len(case['variables']['messages'])} messages, "
              f"generation prompt {case['variables']['add_generation_prompt']}):\n  jinja2: {want!r}\n  ours:   {got!r}")
refused = sum(isinstance(g, dict) for g in ours)
print(f"{len(cases) - failures}/{len(cases)} renders equal jinja2's; {refused} refused by the template as jinja2 refuses them")
if refused == 0:
    print("FAIL: no case exercised raise_exception")
    failures += 1
sys.exit(1 if failures else 0)
