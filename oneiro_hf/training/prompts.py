"""Offline prompt sources for self-distillation.

A drafter is trained on the target's own answers, so what matters is that the prompts cover the kinds of
requests the target will see in use (writing, roleplay, reasoning, math, coding, extraction, STEM,
humanities, translation, summarisation, QA, answering from a context). Nothing here needs the network:

* ``stdlib``: tasks built from the Python standard library's own source and docstrings (explain, refactor,
  port, test, summarise, answer from the docs, write a function from its description, ...).
* ``synthetic``: template-built requests with random slots (math word problems with random numbers, logic
  puzzles, writing and roleplay briefs, STEM/humanities questions, extraction, translation, advice).
* ``debian``: passages from the system's ``/usr/share/doc`` and ``/usr/share/common-licenses`` turned into
  summarise / QA / rewrite / extraction requests.
* ``magpie``: the target itself writes user questions when sampled from its chat template's user-turn prefix.

Every prompt is a dict ``{"id", "source", "prompt"}``; ids are derived from the prompt text, so the same
prompt always has the same id (which is what makes resumable generation possible).
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import json
import logging
import math
import random
import re
import sysconfig
import textwrap
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

Prompt = dict[str, Any]

SOURCES: tuple[str, ...] = ("stdlib", "synthetic", "debian", "magpie", "sharegpt", "arena_hard", "ifeval")
DEFAULT_WEIGHTS: dict[str, float] = {
    "stdlib": 3.0,
    "synthetic": 4.0,
    "debian": 1.0,
    "magpie": 2.0,
    "sharegpt": 8.0,
    "arena_hard": 1.0,
    "ifeval": 1.0,
}
DEBIAN_DOC_ROOTS: tuple[str, ...] = ("/usr/share/doc", "/usr/share/common-licenses")

_MAX_CODE_CHARS = 1800
_MAX_CODE_LINES = 50
_MAX_PASSAGE_CHARS = 1400
_MIN_PASSAGE_CHARS = 300


def make_prompt(source: str, prompt: str, kind: str = "") -> Prompt:
    """Build a prompt record whose id depends only on its source, kind and text (deterministic, dedupable)."""
    digest = hashlib.sha1(prompt.encode("utf-8")).hexdigest()[:16]
    prefix = f"{source}:{kind}" if kind else source
    return {"id": f"{prefix}:{digest}", "source": source, "prompt": prompt}


def _clip(text: str, limit: int) -> str:
    """Cut ``text`` to at most ``limit`` characters at a paragraph or line boundary where possible."""
    text = text.strip()
    if len(text) <= limit:
        return text
    cut = text.rfind("\n\n", 0, limit)
    if cut < limit // 2:
        cut = text.rfind("\n", 0, limit)
    if cut < limit // 2:
        cut = text.rfind(" ", 0, limit)
    return text[: cut if cut > 0 else limit].rstrip()


def _first_sentence(text: str) -> str:
    """First sentence of a docstring-like text, used as a one-line description."""
    flat = " ".join(text.split())
    match = re.match(r"(.+?[.!?])(\s|$)", flat)
    return (match.group(1) if match else flat)[:300]


# --------------------------------------------------------------------------------------------------
# Shared vocabulary for templates
# --------------------------------------------------------------------------------------------------

LANGUAGES = [
    "French",
    "Spanish",
    "German",
    "Italian",
    "Portuguese",
    "Dutch",
    "Chinese",
    "Japanese",
    "Russian",
    "Korean",
    "Polish",
    "Turkish",
    "Swedish",
    "Hindi",
    "Arabic",
]
CODE_LANGUAGES = ["JavaScript", "TypeScript", "Rust", "Go", "C++", "Java", "C#", "Kotlin", "Ruby", "Swift"]
AUDIENCES = [
    "a ten-year-old",
    "a high-school student",
    "a first-year university student",
    "a busy manager",
    "a retired teacher",
    "a software engineer",
    "a complete beginner",
    "an expert in the field",
    "a curious grandparent",
    "a journalist",
]
NAMES = [
    "Alice",
    "Bob",
    "Carmen",
    "David",
    "Elena",
    "Farid",
    "Grace",
    "Hiro",
    "Ingrid",
    "Jamal",
    "Kofi",
    "Lena",
    "Mateo",
    "Nadia",
    "Oscar",
    "Priya",
    "Quinn",
    "Rosa",
    "Samir",
    "Tara",
    "Umar",
    "Vera",
    "Wei",
    "Ximena",
    "Yusuf",
    "Zoe",
]
ITEMS = [
    ("notebook", 3),
    ("pencil", 1),
    ("apple", 1),
    ("sandwich", 6),
    ("book", 12),
    ("ticket", 15),
    ("mug", 8),
    ("plant", 9),
    ("T-shirt", 14),
    ("bottle of juice", 3),
    ("box of cookies", 5),
    ("pair of socks", 4),
    ("USB cable", 7),
    ("candle", 6),
    ("loaf of bread", 3),
]
WRITING_FORMS = [
    "a short poem",
    "a haiku",
    "a limerick",
    "a persuasive essay",
    "a blog post",
    "a product description",
    "a formal email",
    "a cover letter",
    "a short story",
    "a news article",
    "a speech",
    "a motivational message",
    "a dialogue between two friends",
    "a recipe",
    "a travel itinerary",
    "the chorus of a song",
    "a social media post",
    "a radio advertisement",
    "a thank-you note",
    "a book review",
    "a movie plot summary",
    "a diary entry",
    "a letter of complaint",
    "a job posting",
    "a wedding toast",
    "a press release",
    "an op-ed",
    "a fairy tale",
    "a sonnet",
    "a bedtime story",
    "a eulogy for a houseplant",
    "a podcast intro",
    "a museum exhibit label",
    "a scene from a play",
    "a riddle",
]
WRITING_TOPICS = [
    "the first day of spring",
    "a robot learning to cook",
    "working from home",
    "climate change",
    "the importance of sleep",
    "a lost dog finding its way home",
    "electric cars",
    "a small-town bakery",
    "learning a new language",
    "a journey to Mars",
    "friendship",
    "a rainy afternoon in a big city",
    "the invention of the printing press",
    "a new smartphone",
    "a school science fair",
    "recycling",
    "a mysterious letter",
    "the ocean at night",
    "a grandmother's secret recipe",
    "moving to a new country",
    "artificial intelligence",
    "a marathon",
    "a haunted lighthouse",
    "the joy of reading",
    "a community garden",
    "a failed experiment",
    "time travel",
    "a dragon who is afraid of fire",
    "coffee",
    "the last day of school",
    "a volunteer firefighter",
    "city traffic",
    "a chess tournament",
    "a forgotten birthday",
    "an old bicycle",
    "a power outage",
    "a talking cat",
    "a new public library",
    "mountain hiking",
    "a jazz concert",
    "a startup's first customer",
    "a winter storm",
    "healthy eating",
    "a video game tournament",
    "the history of tea",
    "an unexpected inheritance",
    "a lighthouse keeper",
    "a neighborhood cleanup day",
    "the smell of rain",
    "a first job interview",
]
WRITING_CONSTRAINTS = [
    "",
    "",
    "",
    " Keep it under 150 words.",
    " Use a humorous tone.",
    " Write it for children.",
    " Make it sound formal.",
    " Include a surprising twist at the end.",
    " Use exactly three paragraphs.",
    " Write it in the second person.",
    " Make it upbeat and encouraging.",
    " Avoid using the letter 'z'.",
    " Include at least one metaphor.",
    " End with a question for the reader.",
]
ROLES = [
    "a pirate captain",
    "a medieval knight",
    "a tour guide in Rome",
    "a hard-boiled detective",
    "a customer support agent for an internet provider",
    "Socrates",
    "a nervous job candidate",
    "a personal trainer",
    "a French chef",
    "the onboard computer of a spaceship",
    "a school librarian",
    "a family doctor",
    "a kindergarten teacher",
    "a sports commentator",
    "a time traveler from 1850",
    "a barista in a busy cafe",
    "a wise old wizard",
    "a real-estate agent",
    "a museum curator",
    "a park ranger",
    "a stand-up comedian",
    "a Shakespearean actor",
    "a startup founder pitching investors",
    "a car mechanic",
    "a travel agent",
    "a poet laureate",
    "an astronaut on the space station",
    "a grumpy cat",
    "a news anchor",
    "a math tutor",
    "an interviewer for a tech job",
]
ROLE_REQUESTS = [
    "Introduce yourself and describe your typical day.",
    "Give me advice about {topic}.",
    "Describe the biggest challenge you have ever faced.",
    "A customer says they are unhappy. How do you respond?",
    "Tell me a short story from your life.",
    "What do you think about {topic}?",
    "Convince me to try something new.",
    "Explain your job to a child.",
    "I just met you. Greet me and ask me three questions.",
    "Describe your favorite place in vivid detail.",
    "What would you do if you won the lottery?",
    "Teach me one useful skill in five steps.",
]
STEM_CONCEPTS = [
    "photosynthesis",
    "Newton's three laws of motion",
    "entropy",
    "DNA replication",
    "the Pythagorean theorem",
    "black holes",
    "how vaccines work",
    "plate tectonics",
    "binary search",
    "recursion",
    "neural networks",
    "the water cycle",
    "supply voltage and current",
    "Ohm's law",
    "the greenhouse effect",
    "natural selection",
    "the periodic table",
    "chemical bonds",
    "the speed of light",
    "prime numbers",
    "derivatives in calculus",
    "integrals",
    "probability",
    "standard deviation",
    "the immune system",
    "cell division",
    "quantum entanglement",
    "relativity",
    "hash tables",
    "public-key cryptography",
    "the TCP/IP model",
    "compilers",
    "operating system schedulers",
    "sorting algorithms",
    "big-O notation",
    "machine learning",
    "the human heart",
    "enzymes",
    "acids and bases",
    "electromagnetic induction",
    "tides",
    "the Doppler effect",
    "climate versus weather",
    "renewable energy",
    "nuclear fission",
    "antibiotic resistance",
    "the mitochondria",
    "matrices",
    "logarithms",
    "graph theory",
    "version control with Git",
    "databases and indexes",
    "the central limit theorem",
    "friction",
    "sound waves",
    "semiconductors",
    "the Fibonacci sequence",
    "volcanoes",
    "the carbon cycle",
    "gravity on the Moon",
]
HUMANITIES_TOPICS = [
    "the French Revolution",
    "the Renaissance",
    "Stoicism",
    "utilitarianism",
    "the Industrial Revolution",
    "the Silk Road",
    "Impressionism",
    "Shakespeare's Hamlet",
    "supply and demand",
    "democracy in ancient Athens",
    "the Cold War",
    "existentialism",
    "the printing press",
    "the fall of the Roman Empire",
    "the Magna Carta",
    "the civil rights movement",
    "the Enlightenment",
    "inflation",
    "globalization",
    "the Great Depression",
    "Greek mythology",
    "the Age of Exploration",
    "Confucianism",
    "the Harlem Renaissance",
    "the Reformation",
    "opportunity cost",
    "the social contract",
    "Don Quixote",
    "Romanticism in poetry",
    "the Meiji Restoration",
    "the Ottoman Empire",
    "the invention of writing",
    "Baroque music",
    "game theory",
    "behavioral economics",
    "the history of the Olympic Games",
    "Kant's categorical imperative",
    "the Bauhaus movement",
    "the abolition of slavery",
    "the Marshall Plan",
]
CODING_TASKS = [
    "reverses a singly linked list",
    "checks whether a string is a palindrome",
    "prints the numbers 1 to 100 with FizzBuzz rules",
    "merges two sorted lists into one sorted list",
    "computes the n-th Fibonacci number iteratively",
    "finds the longest common prefix of a list of strings",
    "counts word frequencies in a text",
    "removes duplicates from a list while keeping order",
    "validates an email address with a regular expression",
    "flattens a nested list",
    "finds the two numbers in a list that add up to a target",
    "rotates a matrix by 90 degrees",
    "implements binary search on a sorted array",
    "checks whether parentheses are balanced",
    "converts a Roman numeral to an integer",
    "computes the greatest common divisor of two numbers",
    "groups anagrams together",
    "finds the maximum subarray sum",
    "implements a stack with a minimum operation in O(1)",
    "parses a date string and returns the day of the week",
    "reads a CSV file and returns the average of one column",
    "implements an LRU cache",
    "generates all permutations of a string",
    "computes the edit distance between two strings",
    "checks whether a number is prime",
    "sorts a list of dictionaries by a key",
    "implements a simple rate limiter",
    "converts a number to its binary representation",
    "finds the first non-repeating character in a string",
    "chunks a list into pieces of size n",
    "computes a moving average over a list",
    "implements breadth-first search on a graph",
    "serializes a binary tree to a string and back",
    "returns the k most common elements",
    "validates a Sudoku board",
    "implements quicksort",
    "retries a function call with exponential backoff",
    "capitalizes the first letter of every word",
    "computes the median of a stream of numbers",
    "detects a cycle in a linked list",
]
CODING_QUESTIONS = [
    "How do I read a file line by line in {lang}?",
    "What is the difference between a list and a tuple in Python?",
    "How do I handle exceptions in {lang}?",
    "How can I make an HTTP request in {lang}?",
    "Explain closures in {lang} with an example.",
    "What are generics in {lang} and why are they useful?",
    "How do I sort a dictionary by value in Python?",
    "Write a SQL query that returns the top 5 customers by total order amount.",
    "Write a SQL query to find duplicate email addresses in a users table.",
    "Write a bash one-liner that counts the lines of all .py files in a directory.",
    "What is the difference between a process and a thread?",
    "Explain async/await in {lang}.",
    "How do I write a unit test in {lang}?",
    "What does 'immutable' mean in programming?",
    "Explain the difference between == and is in Python.",
    "How do I reverse a string in {lang}?",
    "Write a regular expression that matches a US phone number and explain it.",
    "What is dependency injection? Give a short example in {lang}.",
    "Explain what a race condition is and how to avoid it.",
]
ADVICE_TOPICS = [
    "improve my public speaking",
    "save money on groceries",
    "prepare for a job interview",
    "start running as a beginner",
    "learn to play the guitar",
    "sleep better",
    "manage stress at work",
    "keep houseplants alive",
    "study for an exam",
    "make friends in a new city",
    "plan a budget-friendly vacation",
    "write a good resume",
    "learn to code",
    "organize my closet",
    "reduce screen time",
    "become a better listener",
    "negotiate a higher salary",
    "cook healthy meals quickly",
    "stay motivated while learning",
    "take better photos with my phone",
]
SENTENCES = [
    "The train to the airport leaves every twenty minutes.",
    "Could you please open the window?",
    "I have been learning to play the piano for three years.",
    "The museum is closed on Mondays.",
    "My sister lives in a small village near the sea.",
    "We should leave early to avoid the traffic.",
    "This soup needs a little more salt.",
    "The meeting has been moved to Thursday afternoon.",
    "Where is the nearest pharmacy?",
    "He forgot his umbrella, so he got soaked.",
    "Reading before bed helps me relax.",
    "The children built a snowman in the garden.",
    "Please send me the report by Friday.",
    "The library has thousands of old maps.",
    "I would like a table for four, please.",
    "The new bridge will open next spring.",
    "She won the chess tournament after a long final game.",
    "It is going to rain all weekend.",
    "Turn left at the second traffic light.",
    "Our flight was delayed by two hours.",
]
FOREIGN_PHRASES = [
    "Bonjour, comment allez-vous ?",
    "¿Dónde está la estación de tren?",
    "Ich habe Hunger.",
    "Il fait très beau aujourd'hui.",
    "Me gustaría aprender a cocinar.",
    "Wie spät ist es?",
    "Dove si trova il museo?",
    "Obrigado pela ajuda!",
    "Je ne comprends pas la question.",
    "Vamos a la playa mañana.",
    "Das Wetter ist heute schlecht.",
    "Ho bisogno di un medico.",
]


def _pick_language(rng: random.Random) -> str:
    """A target language, mostly widely used European ones: small targets loop on rare scripts, which wastes
    generation time on near-duplicate data."""
    return rng.choice(LANGUAGES[:7] * 3 + LANGUAGES[7:])


# --------------------------------------------------------------------------------------------------
# Source (a): the Python standard library
# --------------------------------------------------------------------------------------------------

_STDLIB_SKIP_DIRS = {
    "site-packages",
    "dist-packages",
    "test",
    "tests",
    "idle_test",
    "turtledemo",
    "__pycache__",
    "_bundled",
    "__phello__",
}


@dataclass
class _CodeItem:
    """One function, class or module found in the standard library, with what templates need."""

    kind: str  # "function", "class" or "module"
    module: str
    name: str
    doc: str
    code: str
    signature: str


def _stdlib_files(root: Path | None = None) -> list[Path]:
    """All standard-library ``.py`` files outside tests and third-party directories, sorted."""
    root = root or Path(sysconfig.get_paths()["stdlib"])
    files = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).parts
        if any(part in _STDLIB_SKIP_DIRS or part.startswith("config-") for part in rel):
            continue
        files.append(path)
    return sorted(files)


def _module_name(path: Path, root: Path) -> str:
    """Dotted module name of a standard-library file."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _extract_items(path: Path, root: Path) -> list[_CodeItem]:
    """Parse one file (without importing it) and collect documented or reasonably sized definitions."""
    try:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return []
    lines = source.splitlines()  # slicing these is O(1) per item; ast.get_source_segment re-splits every call
    module = _module_name(path, root)
    items: list[_CodeItem] = []
    mod_doc = ast.get_docstring(tree) or ""
    if len(mod_doc) >= 200:
        items.append(_CodeItem("module", module, module, _clip(mod_doc, _MAX_PASSAGE_CHARS), "", ""))

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + node.name
                span = (node.end_lineno or node.lineno) - node.lineno + 1
                code = textwrap.dedent("\n".join(lines[node.lineno - 1 : node.lineno - 1 + span]))
                n_lines = code.count("\n") + 1
                doc = ast.get_docstring(node) or ""
                if 3 <= n_lines <= _MAX_CODE_LINES and len(code) <= _MAX_CODE_CHARS or len(doc) >= 80:
                    code_ok = 3 <= n_lines <= _MAX_CODE_LINES and len(code) <= _MAX_CODE_CHARS
                    try:
                        sig = f"{node.name}({ast.unparse(node.args)})"
                    except Exception:  # noqa: BLE001 - exotic syntax: the signature is optional
                        sig = node.name + "(...)"
                    items.append(
                        _CodeItem(
                            "function",
                            module,
                            name,
                            _clip(doc, _MAX_PASSAGE_CHARS),
                            code if code_ok else "",
                            sig,
                        )
                    )
            elif isinstance(node, ast.ClassDef):
                doc = ast.get_docstring(node) or ""
                if len(doc) >= 80:
                    methods = [
                        n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                    ]
                    items.append(
                        _CodeItem(
                            "class",
                            module,
                            prefix + node.name,
                            _clip(doc, _MAX_PASSAGE_CHARS),
                            "",
                            ", ".join(methods[:20]),
                        )
                    )
                visit(node.body, prefix + node.name + ".")

    visit(tree.body, "")
    return items


_CODE_TEMPLATES: list[tuple[str, str]] = [
    (
        "explain",
        (
            "Explain what this Python function from the `{module}` module does, step by step:\n\n"
            "```python\n{code}\n```"
        ),
    ),
    (
        "explain",
        (
            "What does the following code do? Describe its inputs, its output and any edge cases.\n\n"
            "```python\n{code}\n```"
        ),
    ),
    (
        "explain",
        (
            "Explain this code to someone who is new to programming, using an everyday analogy.\n\n"
            "```python\n{code}\n```"
        ),
    ),
    (
        "refactor",
        (
            "Refactor this function to make it more readable without changing its behavior. "
            "Explain the changes you made.\n\n```python\n{code}\n```"
        ),
    ),
    ("refactor", "Add type hints and a clear docstring to this function:\n\n```python\n{code}\n```"),
    ("refactor", "Rewrite this function in a more modern Python style.\n\n```python\n{code}\n```"),
    (
        "port",
        (
            "Translate this Python function into {code_lang}, keeping the same behavior:\n\n"
            "```python\n{code}\n```"
        ),
    ),
    (
        "test",
        (
            "Write pytest unit tests for this function. Cover normal cases and edge cases.\n\n"
            "```python\n{code}\n```"
        ),
    ),
    (
        "review",
        (
            "Review the following code as a senior engineer. Point out possible bugs, unclear parts and "
            "improvements.\n\n```python\n{code}\n```"
        ),
    ),
    (
        "complexity",
        (
            "What is the time and space complexity of this function? Justify your answer.\n\n"
            "```python\n{code}\n```"
        ),
    ),
    (
        "extract",
        (
            "List every parameter of this function with its default value (or null if it has none) as a "
            "JSON object.\n\n```python\n{code}\n```"
        ),
    ),
    (
        "extract",
        (
            "Which other functions, methods or attributes does this code use? Give a bulleted list.\n\n"
            "```python\n{code}\n```"
        ),
    ),
    (
        "summarize",
        (
            "Give a one-sentence summary of this function, then a short paragraph with more detail.\n\n"
            "```python\n{code}\n```"
        ),
    ),
    (
        "commit",
        "Write a concise git commit message for a change that adds this function:\n\n```python\n{code}\n```",
    ),
]

_DOC_TEMPLATES: list[tuple[str, str]] = [
    ("coding", "Write a Python function `{signature}` that does the following:\n\n{doc}"),
    ("coding", "Implement this in Python and include a short usage example:\n\n{first}"),
    ("summarize", "Summarize this documentation in two sentences:\n\n{doc}"),
    (
        "summarize",
        "Here is the documentation of `{module}.{name}`. Summarize it as three bullet points.\n\n{doc}",
    ),
    (
        "qa",
        (
            "Here is the documentation for `{module}.{name}`:\n\n{doc}\n\nWhat is it used for, and when would "
            "you use it? Give an example."
        ),
    ),
    (
        "rag",
        (
            "Answer the question using only the context below. If the context does not contain the answer, "
            "say so.\n\nContext:\n{doc}\n\nQuestion: {question}"
        ),
    ),
    ("rag", "{doc}\n\nBased on the passage above, {question_lower}"),
    ("rewrite", "Rewrite the following documentation so that a beginner can understand it:\n\n{doc}"),
    ("rewrite", "Turn this documentation into a numbered list of the key facts:\n\n{doc}"),
    ("translate", "Translate this technical documentation into {lang}:\n\n{doc}"),
    ("quiz", "Write three quiz questions, with answers, that test understanding of this text:\n\n{doc}"),
    (
        "writing",
        (
            "Write a short story in which a programmer discovers `{module}.{name}`, which works like this: "
            "{first}"
        ),
    ),
    (
        "roleplay",
        (
            "You are a senior Python developer mentoring an intern. The intern asks you what "
            "`{module}.{name}` does and when to use it. Reply in character. Here are its docs:\n\n{doc}"
        ),
    ),
    ("writing", "Write a limerick about the Python {kind} `{name}`, which does this: {first}"),
]

_MODULE_TEMPLATES: list[tuple[str, str]] = [
    ("summarize", "Summarize the purpose of the Python module `{module}` from its documentation:\n\n{doc}"),
    ("qa", "What problems does the `{module}` module solve? Use this description:\n\n{doc}"),
    (
        "writing",
        "Write a short tutorial introduction to the Python `{module}` module, with one code example.",
    ),
    ("qa", "What is the Python `{module}` module used for? Give a practical example."),
    ("rewrite", "Explain this module documentation to {audience}:\n\n{doc}"),
    ("rag", "Context:\n{doc}\n\nUsing only the context, answer: {question}"),
]

_DOC_QUESTIONS = [
    "What does it do?",
    "What arguments does it take?",
    "What does it return?",
    "What errors or exceptions can it raise?",
    "Are there any caveats or special cases?",
    "What is the main purpose described here?",
    "What happens when the input is empty?",
    "Which version of Python introduced this?",
    "How is this different from similar tools?",
]


def _render_item(item: _CodeItem, rng: random.Random) -> tuple[str, str] | None:
    """Turn one stdlib item into a (kind, prompt) pair with a randomly chosen template, if any template fits."""
    slots = {
        "module": item.module,
        "name": item.name,
        "code": item.code,
        "doc": item.doc,
        "signature": item.signature or item.name,
        "first": _first_sentence(item.doc) if item.doc else "",
        "lang": _pick_language(rng),
        "code_lang": rng.choice(CODE_LANGUAGES),
        "audience": rng.choice(AUDIENCES),
        "kind": item.kind,
    }
    question = rng.choice(_DOC_QUESTIONS)
    slots["question"] = question
    slots["question_lower"] = question[0].lower() + question[1:]
    if item.kind == "module":
        choices = _MODULE_TEMPLATES
    else:
        choices = []
        if item.code:
            choices += _CODE_TEMPLATES
        if item.doc:
            choices += [t for t in _DOC_TEMPLATES if item.kind == "function" or t[0] not in ("coding",)]
    if not choices:
        return None
    kind, template = rng.choice(choices)
    return kind, template.format(**slots)


def stdlib_prompts(seed: int = 0, root: str | Path | None = None, per_file: int = 3) -> Iterator[Prompt]:
    """Prompts built from the standard library's source and docstrings (files parsed lazily, never imported).

    Files are visited in a seeded random order, taking a few items from each per round, so a small limit
    already spans many modules.
    """
    rng = random.Random(f"stdlib-{seed}")
    root_path = Path(root) if root is not None else Path(sysconfig.get_paths()["stdlib"])
    files = _stdlib_files(root_path)
    rng.shuffle(files)
    pending: list[list[_CodeItem]] = []
    seen: set[str] = set()
    for path in files:
        items = _extract_items(path, root_path)
        rng.shuffle(items)
        if items[per_file:]:
            pending.append(items[per_file:])
        for item in items[:per_file]:
            rendered = _render_item(item, rng)
            if rendered and (rec := make_prompt("stdlib", rendered[1], rendered[0]))["id"] not in seen:
                seen.add(rec["id"])
                yield rec
    while pending:  # later rounds: the remaining items, still interleaved across files
        still: list[list[_CodeItem]] = []
        for items in pending:
            for item in items[:per_file]:
                rendered = _render_item(item, rng)
                if rendered and (rec := make_prompt("stdlib", rendered[1], rendered[0]))["id"] not in seen:
                    seen.add(rec["id"])
                    yield rec
            if items[per_file:]:
                still.append(items[per_file:])
        pending = still


# --------------------------------------------------------------------------------------------------
# Source (a'): template-built requests with random slots
# --------------------------------------------------------------------------------------------------

_MATH_SUFFIXES = [
    "",
    "",
    " Show your reasoning step by step.",
    " Explain your answer.",
    " Think it through carefully before answering.",
    " Give the final answer on its own line.",
]


def _money(x: float) -> str:
    return f"${x:,.2f}".replace(".00", "")


def _math_problem(rng: random.Random) -> str:
    """A word problem with random numbers (always solvable with whole or simple decimal answers)."""
    name = rng.choice(NAMES)
    other = rng.choice([n for n in NAMES if n != name])
    kind = rng.randrange(18)
    if kind == 0:
        item, price = rng.choice(ITEMS)
        qty = rng.randint(2, 9)
        bill = rng.choice([20, 50, 100]) if qty * price < 20 else 100 if qty * price < 100 else 200
        text = (
            f"{name} buys {qty} of the {item}s that cost {_money(price)} each and pays with a {_money(bill)} "
            f"bill. How much change does {name} get?"
        )
    elif kind == 1:
        speed, hours, hours2 = rng.randint(40, 120), rng.randint(2, 6), rng.randint(1, 9)
        text = (
            f"A train travels {speed * hours} km in {hours} hours. At the same speed, how far does it travel "
            f"in {hours2} hours?"
        )
    elif kind == 2:
        price, pct = rng.randint(20, 400), rng.choice([10, 15, 20, 25, 30, 40, 50])
        text = f"A jacket costs {_money(price)} and is on sale for {pct}% off. What is the sale price?"
    elif kind == 3:
        principal, rate, years = (
            rng.choice([500, 1000, 2500, 4000, 10000]),
            rng.randint(2, 8),
            rng.randint(2, 10),
        )
        style = rng.choice(["simple", "compound"])
        text = (
            f"If you invest {_money(principal)} at {rate}% {style} annual interest, how much money will you "
            f"have after {years} years?"
        )
    elif kind == 4:
        young, factor, years = rng.randint(4, 20), rng.randint(2, 4), rng.randint(2, 10)
        total = young * factor + young + 2 * years
        text = (
            f"{name} is {factor} times as old as {other}. In {years} years, the sum of their ages will be "
            f"{total}. How old is {other} now?"
        )
    elif kind == 5:
        a, b = rng.randint(2, 9), rng.randint(2, 9)
        text = (
            f"{name} can paint a fence in {a} hours and {other} can paint the same fence in {b} hours. How long "
            f"will it take them if they work together?"
        )
    elif kind == 6:
        w, h = rng.randint(3, 40), rng.randint(3, 40)
        text = rng.choice(
            [
                f"A rectangle is {w} cm wide and {h} cm long. What are its area and perimeter?",
                f"A circle has a radius of {w} m. What are its area and circumference?",
                (
                    f"A garden is {w} m by {h} m. Fencing costs {_money(rng.randint(3, 15))} per meter. "
                    "How much does it cost to fence the whole garden?"
                ),
            ]
        )
    elif kind == 7:
        scores = [rng.randint(50, 100) for _ in range(rng.randint(5, 9))]
        text = f"The test scores of a group of students are {', '.join(map(str, scores))}. Find the mean, median and range."
    elif kind == 8:
        a, b, c, d = rng.randint(1, 9), rng.randint(2, 12), rng.randint(1, 9), rng.randint(2, 12)
        op = rng.choice(["+", "-", "×", "÷"])
        text = f"Compute {a}/{b} {op} {c}/{d} and simplify the result."
    elif kind == 9:
        n = rng.randint(5, 15)
        k = rng.randint(2, min(5, n - 1))
        text = rng.choice(
            [
                f"In how many ways can a committee of {k} people be chosen from {n} people?",
                (
                    f"How many different ways can {k} runners finish first, second and so on in a race "
                    f"with {n} runners?"
                ),
            ]
        )
    elif kind == 10:
        x = rng.randint(-12, 20)
        a = rng.choice([n for n in range(-9, 10) if n not in (0, 1)])
        b = rng.randint(-30, 30)
        text = f"Solve for x: {a}x {'+' if b >= 0 else '-'} {abs(b)} = {a * x + b}."
    elif kind == 11:
        a, b = rng.randint(1, 7), rng.randint(1, 7)
        total = (a + b) * rng.randint(2, 12)
        text = (
            f"The ratio of cats to dogs at a shelter is {a}:{b}. If there are {total} animals in total, how "
            f"many are cats and how many are dogs?"
        )
    elif kind == 12:
        rate, hours, pct = rng.randint(10, 60), rng.randint(3, 10), rng.choice([20, 25, 40, 50, 60, 75])
        text = (
            f"A bakery bakes {rate} loaves of bread per hour for {hours} hours and sells {pct}% of them by "
            f"noon. How many loaves are left?"
        )
    elif kind == 13:
        a, d, n = rng.randint(-5, 20), rng.randint(2, 9), rng.randint(10, 60)
        text = (
            f"What is the {n}th term of the arithmetic sequence {a}, {a + d}, {a + 2 * d}, {a + 3 * d}, ...? "
            f"What is the sum of its first {n} terms?"
        )
    elif kind == 14:
        red, blue = rng.randint(2, 9), rng.randint(2, 9)
        text = (
            f"A bag contains {red} red marbles and {blue} blue marbles. Two marbles are drawn without "
            f"replacement. What is the probability that both are red?"
        )
    elif kind == 15:
        a, b = rng.randint(12, 240), rng.randint(12, 240)
        text = rng.choice(
            [
                f"Find the greatest common divisor and the least common multiple of {a} and {b}.",
                f"Is {a * 2 + 1} a prime number? Explain how you checked.",
            ]
        )
    elif kind == 16:
        amount = rng.randint(3, 250)
        unit = rng.choice(
            [
                ("miles", "kilometers"),
                ("kilograms", "pounds"),
                ("liters", "gallons"),
                ("degrees Fahrenheit", "degrees Celsius"),
                ("inches", "centimeters"),
            ]
        )
        text = f"Convert {amount} {unit[0]} to {unit[1]}."
    else:
        start, spend, earn = rng.randint(20, 200), rng.randint(5, 60), rng.randint(5, 80)
        text = (
            f"{name} had {_money(start)}. {name} spent {_money(spend)} on groceries, then earned "
            f"{_money(earn)} babysitting, and finally gave half of the money to {other}. How much money does "
            f"{name} have now?"
        )
    return text + rng.choice(_MATH_SUFFIXES)


def _reasoning_problem(rng: random.Random) -> str:
    """A small logic or common-sense reasoning puzzle with random names and numbers."""
    a, b, c, d = rng.sample(NAMES, 4)
    kind = rng.randrange(9)
    if kind == 0:
        adj, small = rng.choice(
            [("taller", "shortest"), ("older", "youngest"), ("faster", "slowest"), ("heavier", "lightest")]
        )
        text = f"{a} is {adj} than {b}. {b} is {adj} than {c}. {d} is {adj} than {a}. Who is the {small}?"
    elif kind == 1:
        x, y, z = rng.sample(
            [
                "cats",
                "mammals",
                "pets",
                "birds",
                "animals",
                "dogs",
                "reptiles",
                "fish",
                "flowers",
                "plants",
                "roses",
                "trees",
            ],
            3,
        )
        text = f"All {x} are {y}. Some {y} are {z}. Can we conclude that some {x} are {z}? Explain."
    elif kind == 2:
        days = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
        text = (
            f"If today is {rng.choice(days)}, what day of the week will it be in {rng.randint(3, 400)} days?"
        )
    elif kind == 3:
        word = rng.choice(
            [
                "strawberry",
                "banana",
                "mississippi",
                "committee",
                "bookkeeper",
                "programming",
                "assessment",
                "parallel",
                "occurrence",
                "balloon",
            ]
        )
        letter = rng.choice(sorted(set(word)))
        text = f"How many times does the letter '{letter}' appear in the word '{word}'?"
    elif kind == 4:
        start, ratio = rng.randint(1, 6), rng.randint(2, 4)
        seq = [start * ratio**i for i in range(5)]
        text = f"What number comes next in the sequence {', '.join(map(str, seq))}, ...? Explain the pattern."
    elif kind == 5:
        h, m = rng.randint(1, 12), rng.choice(range(0, 60, 5))
        text = f"What is the angle between the hour hand and the minute hand of a clock at {h}:{m:02d}?"
    elif kind == 6:
        rel = rng.choice(["mother", "father", "sister", "brother"])
        rel2 = rng.choice(["brother", "sister", "father", "mother"])
        text = f"{a} is {b}'s {rel}. {c} is {a}'s {rel2}. How is {c} related to {b}?"
    elif kind == 7:
        n, eat, buy = rng.randint(5, 20), rng.randint(1, 4), rng.randint(1, 10)
        text = (
            f"I have {n} apples. I eat {eat} and buy {buy} more, then I give away a third of what I have, "
            f"rounded down. How many apples do I have now?"
        )
    else:
        text = (
            f"{a}, {b} and {c} each own a different pet: a cat, a dog and a parrot. {a} is allergic to fur. "
            f"{b} does not own the dog. Who owns which pet?"
        )
    return text + rng.choice(["", " Explain your reasoning.", " Think step by step."])


def _extraction_task(rng: random.Random) -> str:
    """Extraction from a synthetic record with random names, dates and amounts."""
    name, other = rng.sample(NAMES, 2)
    item, price = rng.choice(ITEMS)
    qty = rng.randint(1, 12)
    date = (
        f"{rng.choice(['January', 'March', 'May', 'July', 'September', 'November'])} {rng.randint(1, 28)}, "
        f"{rng.randint(2015, 2025)}"
    )
    city = rng.choice(["Lisbon", "Toronto", "Nairobi", "Osaka", "Denver", "Krakow", "Melbourne", "Lyon"])
    kind = rng.randrange(4)
    if kind == 0:
        text = (
            f"On {date}, {name} ordered {qty} {item}s from a shop in {city} for a total of "
            f"{_money(qty * price)}. The order was shipped two days later."
        )
        return f"Extract the customer name, date, city, item, quantity and total from this text as JSON:\n\n{text}"
    if kind == 1:
        phone = f"+1-555-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}"
        email = f"{other.lower()}.{rng.choice(['work', 'home', 'dev'])}@example.com"
        text = (
            f"Hi team, please contact {other} at {email} or {phone} before the meeting in {city} on {date}. "
            f"{name} will bring the slides."
        )
        return f"List all people, email addresses, phone numbers, places and dates mentioned here:\n\n{text}"
    if kind == 2:
        rows = [f"{n}: {rng.randint(50, 100)} points" for n in rng.sample(NAMES, 5)]
        return (
            "Convert the following results into a markdown table sorted by score, highest first:\n\n"
            + "\n".join(rows)
        )
    return (
        f"Read this note and extract the action items as a checklist:\n\n{name} will email the budget to "
        f"{other} by {date}. {other} needs to book a room in {city}, and someone should order {qty} "
        f"{item}s for the workshop."
    )


def _synthetic_prompt(rng: random.Random) -> tuple[str, str]:
    """One template-built request; returns (category, prompt)."""
    category = rng.choice(
        [
            "math",
            "math",
            "reasoning",
            "writing",
            "writing",
            "roleplay",
            "stem",
            "stem",
            "humanities",
            "coding",
            "coding",
            "extraction",
            "translation",
            "advice",
        ]
    )
    if category == "math":
        return category, _math_problem(rng)
    if category == "reasoning":
        return category, _reasoning_problem(rng)
    if category == "writing":
        form, topic = rng.choice(WRITING_FORMS), rng.choice(WRITING_TOPICS)
        return category, rng.choice(
            [
                f"Write {form} about {topic}.",
                f"Compose {form} on the theme of {topic}.",
                f"Can you write {form} about {topic}?",
            ]
        ) + rng.choice(WRITING_CONSTRAINTS)
    if category == "roleplay":
        role = rng.choice(ROLES)
        request = rng.choice(ROLE_REQUESTS).format(topic=rng.choice(ADVICE_TOPICS + WRITING_TOPICS))
        return category, rng.choice(
            [
                f"Pretend you are {role}. {request}",
                f"I want you to act as {role}. Stay in character. {request}",
                f"Roleplay as {role}. {request}",
            ]
        )
    if category == "stem":
        concept = rng.choice(STEM_CONCEPTS)
        other = rng.choice([c for c in STEM_CONCEPTS if c != concept])
        return category, rng.choice(
            [
                f"Explain {concept} in simple terms.",
                f"What is {concept}? Give an example.",
                f"Explain {concept} to {rng.choice(AUDIENCES)}.",
                f"What are common misconceptions about {concept}?",
                f"How is {concept} used or observed in everyday life?",
                f"Compare {concept} and {other}.",
                f"Write three exam questions about {concept}, with answers.",
            ]
        )
    if category == "humanities":
        topic = rng.choice(HUMANITIES_TOPICS)
        other = rng.choice([t for t in HUMANITIES_TOPICS if t != topic])
        return category, rng.choice(
            [
                f"What were the main causes and consequences of {topic}?",
                f"Summarize the key ideas of {topic}.",
                f"Why does {topic} still matter today?",
                f"Write an essay outline about {topic}.",
                f"Compare {topic} and {other}.",
                f"Explain {topic} to {rng.choice(AUDIENCES)}.",
                f"Give three arguments for and three against the importance of {topic}.",
            ]
        )
    if category == "coding":
        lang = rng.choice(["Python", "Python", "Python"] + CODE_LANGUAGES)
        task = rng.choice(CODING_TASKS)
        return category, rng.choice(
            [
                f"Write a {lang} function that {task}.",
                f"Implement a function in {lang} that {task}, and explain its time complexity.",
                f"Write a {lang} function that {task}. Include a few test cases.",
                rng.choice(CODING_QUESTIONS).format(lang=lang),
            ]
        )
    if category == "extraction":
        return category, _extraction_task(rng)
    if category == "translation":
        lang = _pick_language(rng)
        return category, rng.choice(
            [
                f"Translate into {lang}: {rng.choice(SENTENCES)}",
                f'How do you say "{rng.choice(SENTENCES)}" in {lang}?',
                f'What does "{rng.choice(FOREIGN_PHRASES)}" mean in English?',
                f"Translate these sentences into {lang}:\n" + "\n".join(rng.sample(SENTENCES, 3)),
            ]
        )
    topic = rng.choice(ADVICE_TOPICS)
    return "advice", rng.choice(
        [
            f"How can I {topic}?",
            f"Give me five practical tips to {topic}.",
            f"Make a {rng.randint(2, 8)}-week plan to help me {topic}.",
            f"What are the most common mistakes people make when they try to {topic}?",
        ]
    )


def synthetic_prompts(seed: int = 0, max_consecutive_duplicates: int = 2000) -> Iterator[Prompt]:
    """Endless template-built requests across many task types; stops only when templates stop yielding new text."""
    rng = random.Random(f"synthetic-{seed}")
    seen: set[str] = set()
    dupes = 0
    while dupes < max_consecutive_duplicates:
        category, text = _synthetic_prompt(rng)
        rec = make_prompt("synthetic", text, category)
        if rec["id"] in seen:
            dupes += 1
            continue
        dupes = 0
        seen.add(rec["id"])
        yield rec


# --------------------------------------------------------------------------------------------------
# Source (b): Debian documentation passages
# --------------------------------------------------------------------------------------------------

_DOC_NAME = re.compile(
    r"^(readme|news|changelog|copyright|todo|authors|faq|usage|howto|intro|notes)"
    r"([._-].*)?$|.*\.(txt|md|rst)(\.gz)?$",
    re.IGNORECASE,
)


def _read_doc(path: Path, max_bytes: int = 200_000) -> str | None:
    """Read a (possibly gzipped) text file; ``None`` for binary or unreadable files."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as fh:
                raw = fh.read(max_bytes)
        else:
            with open(path, "rb") as fh:
                raw = fh.read(max_bytes)
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    if b"\x00" in raw:
        return None
    text = raw.decode("utf-8", errors="replace")
    if text.count("\ufffd") > len(text) // 100:
        return None
    return text


def _passages(text: str, max_passages: int) -> list[str]:
    """Split text into paragraph-aligned passages of a readable size."""
    paras = [p.strip("\n") for p in re.split(r"\n\s*\n", text.replace("\r\n", "\n")) if p.strip()]
    out: list[str] = []
    buf = ""
    for para in paras:
        if len(para) > _MAX_PASSAGE_CHARS:
            para = _clip(para, _MAX_PASSAGE_CHARS)
        if buf and len(buf) + len(para) + 2 > _MAX_PASSAGE_CHARS:
            if len(buf) >= _MIN_PASSAGE_CHARS:
                out.append(buf)
                if len(out) >= max_passages:
                    return out
            buf = ""
        buf = f"{buf}\n\n{para}" if buf else para
    if len(buf) >= _MIN_PASSAGE_CHARS and len(out) < max_passages:
        out.append(buf)
    return out


_PASSAGE_TEMPLATES: list[tuple[str, str]] = [
    ("summarize", "Summarize the following text in a few sentences:\n\n{passage}"),
    ("summarize", "Give a short bullet-point summary of this passage:\n\n{passage}"),
    ("summarize", "TL;DR:\n\n{passage}"),
    ("qa", "Read the passage and answer: {question}\n\n{passage}"),
    (
        "rag",
        (
            "Use only the information in the context to answer the question. If the answer is not in the context, "
            "say that you don't know.\n\nContext:\n{passage}\n\nQuestion: {question}"
        ),
    ),
    ("rewrite", "Rewrite this text in plain, simple English:\n\n{passage}"),
    ("rewrite", "Rewrite this as a short, friendly announcement for users:\n\n{passage}"),
    ("rewrite", "Explain what this text means to {audience}:\n\n{passage}"),
    (
        "extract",
        (
            "Extract every software name, version number, date and person mentioned in this text, as JSON:\n\n"
            "{passage}"
        ),
    ),
    ("extract", "List the key facts from this text as a numbered list:\n\n{passage}"),
    ("translate", "Translate the first paragraph of this text into {lang}:\n\n{passage}"),
    ("title", "Suggest a clear title and five keywords for this text:\n\n{passage}"),
]
_PASSAGE_QUESTIONS = [
    "What is the main point of this text?",
    "Who is this text written for?",
    "What changed, according to this text?",
    "What problems are mentioned, and how were they solved?",
    "What does this text allow or forbid?",
    "What should a user do after reading this?",
    "Which programs or packages are mentioned?",
    "What are the conditions described here?",
]
_CHANGELOG_TEMPLATES = [
    ("qa", "Here is a changelog entry. What bugs were fixed and what features were added?\n\n{passage}"),
    ("rewrite", "Turn this changelog entry into user-friendly release notes:\n\n{passage}"),
]
_LICENSE_TEMPLATES = [
    ("qa", "Based only on this license text, may I use the software commercially? Explain.\n\n{passage}"),
    ("rewrite", "Explain this license excerpt in plain English:\n\n{passage}"),
    (
        "qa",
        (
            "What obligations does this license text place on someone who redistributes the "
            "software?\n\n{passage}"
        ),
    ),
]


def _doc_files(roots: Sequence[str | Path]) -> list[tuple[Path, str]]:
    """Candidate documentation files under ``roots`` as (path, flavour) pairs, sorted."""
    out: list[tuple[Path, str]] = []
    for root in roots:
        root = Path(root)
        if not root.is_dir():
            continue
        licenses = root.name == "common-licenses"
        for path in sorted(root.rglob("*")):
            if not path.is_file() or path.is_symlink():
                continue
            name = path.name.lower()
            if licenses:
                out.append((path, "license"))
            elif name.startswith("changelog"):
                out.append((path, "changelog"))
            elif name.startswith("copyright"):
                out.append((path, "license"))
            elif _DOC_NAME.match(name):
                out.append((path, "doc"))
    return out


def debian_prompts(
    seed: int = 0, roots: Sequence[str | Path] = DEBIAN_DOC_ROOTS, per_file: int = 2
) -> Iterator[Prompt]:
    """Summarise / QA / rewrite / extraction prompts over local documentation passages (deduplicated)."""
    rng = random.Random(f"debian-{seed}")
    files = _doc_files(roots)
    if not files:
        logger.warning(
            "No documentation files found under %s; the debian source yields nothing.", list(roots)
        )
        return
    rng.shuffle(files)
    seen_passages: set[str] = set()
    for path, flavour in files:
        text = _read_doc(path)
        if not text:
            continue
        limit = 1 if flavour == "changelog" else per_file
        for passage in _passages(text, limit):
            key = hashlib.sha1(" ".join(passage.split()).encode()).hexdigest()
            if key in seen_passages:
                continue
            seen_passages.add(key)
            templates = list(_PASSAGE_TEMPLATES)
            if flavour == "changelog":
                templates += _CHANGELOG_TEMPLATES * 3
            elif flavour == "license":
                templates += _LICENSE_TEMPLATES * 3
            kind, template = rng.choice(templates)
            prompt = template.format(
                passage=passage,
                question=rng.choice(_PASSAGE_QUESTIONS),
                audience=rng.choice(AUDIENCES),
                lang=_pick_language(rng),
            )
            yield make_prompt("debian", prompt, kind)


# --------------------------------------------------------------------------------------------------
# Source (c): Magpie-style self-instruct
# --------------------------------------------------------------------------------------------------

_SENTINEL = "\x00ONEIRO_USER_TURN\x00"
_PLAIN_PREFIX = "Below is a question that someone asked an expert.\n\nQuestion:"


def user_turn_prefix(tokenizer: Any) -> str:
    """Text of the chat template up to where the user's message starts (system prompt included).

    Rendering a conversation with a sentinel user message and cutting at the sentinel works for any template,
    unlike rendering an empty conversation, which many templates turn into an empty string.
    """
    if not getattr(tokenizer, "chat_template", None):
        return _PLAIN_PREFIX
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": _SENTINEL}], tokenize=False)
    cut = rendered.find(_SENTINEL)
    if cut <= 0:
        raise ValueError(
            "Could not locate the user turn in the tokenizer's chat template; magpie prompts need a template that "
            "renders the user's message verbatim. Use the stdlib/synthetic/debian sources instead."
        )
    return rendered[:cut]


def stop_token_ids(tokenizer: Any, model: Any | None = None) -> list[int]:
    """Token ids that end a turn: the model's and tokenizer's EOS plus the template's end-of-turn marker."""
    ids: set[int] = set()
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in ([gen_eos] if isinstance(gen_eos, int) else list(gen_eos or [])) + [tokenizer.eos_token_id]:
        if value is not None:
            ids.add(int(value))
    template = getattr(tokenizer, "chat_template", None) or ""
    for marker in ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|end|>", "</s>"):
        if marker in template:
            tok_id = tokenizer.convert_tokens_to_ids(marker)
            if isinstance(tok_id, int) and tok_id != getattr(tokenizer, "unk_token_id", None):
                ids.add(tok_id)
    return sorted(ids)


def _looks_like_question(text: str) -> bool:
    """Reject empty, tiny, runaway or repetitive samples."""
    words = text.split()
    if len(words) < 4 or len(text) > 1500:
        return False
    return len(set(words)) >= 0.5 * len(words) or len(words) < 12


def magpie_prompts(
    model: Any,
    tokenizer: Any,
    seed: int = 0,
    batch_size: int = 16,
    max_new_tokens: int = 96,
    temperature: float = 0.9,
    top_p: float = 0.95,
    max_empty_batches: int = 20,
) -> Iterator[Prompt]:
    """Let the target write user questions by sampling from its user-turn prefix (deduplicated).

    Only samples that end with an end-of-turn token are kept (a cut-off question is not a question). Sampling
    runs inside a forked RNG so it does not disturb the caller's random state.
    """
    if model is None or tokenizer is None:
        raise ValueError(
            "The magpie source needs the target model and its tokenizer: pass model= and tokenizer=."
        )
    import torch

    prefix = user_turn_prefix(tokenizer)
    plain = not getattr(tokenizer, "chat_template", None)
    enc = tokenizer(prefix, return_tensors="pt", add_special_tokens=plain)
    stop_ids = stop_token_ids(tokenizer, model)
    if plain:  # base model: a newline ends the question
        stop_ids = sorted(
            set(stop_ids) | {i for t, i in tokenizer.get_vocab().items() if t in ("\n", "Ċ", "<0x0A>")}
        )
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop_ids[0]
    device = next(model.parameters()).device
    input_ids = enc["input_ids"].to(device).repeat(batch_size, 1)
    seen: set[str] = set()
    empty, batch_index = 0, 0
    while empty < max_empty_batches:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(seed * 100003 + batch_index)
            out = model.generate(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                do_sample=True,
                temperature=temperature,
                top_p=top_p,
                top_k=0,
                max_new_tokens=max_new_tokens,
                eos_token_id=stop_ids,
                pad_token_id=pad_id,
            )
        batch_index += 1
        new = 0
        for row in out[:, input_ids.shape[1] :].tolist():
            stop_at = next((i for i, t in enumerate(row) if t in stop_ids), None)
            if stop_at is None:
                continue
            text = tokenizer.decode(row[:stop_at], skip_special_tokens=True).strip()
            key = " ".join(text.lower().split())
            if not _looks_like_question(text) or key in seen:
                continue
            seen.add(key)
            new += 1
            yield make_prompt("magpie", text)
        empty = 0 if new else empty + 1
        if batch_index % 10 == 0:
            logger.info("magpie: %d questions kept from %d samples", len(seen), batch_index * batch_size)


# --------------------------------------------------------------------------------------------------
# User-provided prompts and mixing
# --------------------------------------------------------------------------------------------------

_PROMPT_COLUMNS = ("prompt", "instruction", "question", "query", "input", "text")


def _prompt_from_record(rec: Any, where: str) -> str:
    """Prompt text of one user record: ``prompt`` or the first of ``turns`` (later turns need earlier answers)."""
    if not isinstance(rec, dict):
        raise ValueError(  # noqa: TRY004 - malformed input data: callers catch ValueError
            f'{where}: expected a JSON object like {{"prompt": "..."}}, got {type(rec).__name__}.'
        )
    if isinstance(rec.get("prompt"), str) and rec["prompt"].strip():
        return rec["prompt"]
    turns = rec.get("turns")
    if isinstance(turns, list) and turns and isinstance(turns[0], str) and turns[0].strip():
        return turns[0]
    if isinstance(rec.get("instruction"), str) and rec["instruction"].strip():
        extra = rec.get("input")
        return rec["instruction"] + (f"\n\n{extra}" if isinstance(extra, str) and extra.strip() else "")
    for column in _PROMPT_COLUMNS[2:]:
        if isinstance(rec.get(column), str) and rec[column].strip():
            return rec[column]
    raise ValueError(
        f'{where}: no prompt found. Each record needs a non-empty "prompt" string or a non-empty "turns" list '
        f"of strings (keys present: {sorted(rec)})."
    )


def load_user_prompts(path: str | Path, split: str = "train") -> list[Prompt]:
    """Read user prompts from a JSONL file (``{"prompt": ...}`` or ``{"turns": [...]}`` per line) or a dataset.

    A path that is not a file is treated as a ``datasets`` directory (saved with ``save_to_disk``) or dataset
    name. Multi-turn records contribute their first turn. Errors name the file and line to fix.
    """
    p = Path(path).expanduser()
    records: list[Prompt] = []
    if p.is_file():
        with open(p, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                where = f"{p}:{lineno}"
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(
                        f"{where}: malformed JSON ({exc.msg}); each line must be one JSON object."
                    ) from None
                text = _prompt_from_record(rec, where)
                pid = str(rec["id"]) if rec.get("id") is not None else make_prompt("user", text)["id"]
                records.append({"id": pid, "source": str(rec.get("source", "user")), "prompt": text})
        if not records:
            raise ValueError(
                f"{p}: no prompts found (the file is empty). Add one JSON object per line, "
                'e.g. {"prompt": "Explain recursion."}.'
            )
    else:
        try:
            import datasets
        except ImportError as exc:  # pragma: no cover - datasets is a declared dependency
            raise ValueError(f"{path} is not a file and the datasets package is not installed.") from exc
        try:
            if p.is_dir() and ((p / "dataset_info.json").exists() or (p / "dataset_dict.json").exists()):
                ds = datasets.load_from_disk(str(p))
            else:
                ds = datasets.load_dataset(str(path), split=split)
        except Exception as exc:  # any loader failure: re-raise with the fix
            raise ValueError(
                f"Could not load prompts from {path!r}: it is not a JSONL file and loading it as a "
                f"dataset failed ({type(exc).__name__}: {exc}). Pass a JSONL file or a local dataset "
                "directory."
            ) from exc
        if isinstance(ds, datasets.DatasetDict):
            if split not in ds:
                raise ValueError(f"Dataset {path!r} has no split {split!r}; available: {list(ds)}.")
            ds = ds[split]
        for index, rec in enumerate(ds):
            text = _prompt_from_record(rec, f"{path} row {index}")
            pid = str(rec["id"]) if rec.get("id") is not None else make_prompt("user", text)["id"]
            records.append({"id": pid, "source": "user", "prompt": text})
        if not records:
            raise ValueError(f"Dataset {path!r} (split {split!r}) contains no rows.")
    return records


def parse_sources(sources: str | Iterable[str]) -> list[tuple[str, float]]:
    """Parse ``"stdlib,synthetic:2,magpie"`` (or a list of such items) into (name, weight) pairs.

    ``all`` expands to every built-in source; an item that is not a source name but an existing path is a
    file of user prompts. Unknown names raise with the list of valid ones.
    """
    items = sources.split(",") if isinstance(sources, str) else list(sources)
    out: list[tuple[str, float]] = []
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        name, weight = item, None
        if ":" in item and not Path(item).exists():
            name, _, w = item.rpartition(":")
            try:
                weight = float(w)
            except ValueError:
                raise ValueError(
                    f"Bad weight in prompt source {item!r}; use NAME or NAME:WEIGHT, e.g. stdlib:2."
                ) from None
            if weight <= 0 or not math.isfinite(weight):
                raise ValueError(f"Weight of prompt source {item!r} must be a positive number.")
        if name == "all":
            out += [(s, weight or DEFAULT_WEIGHTS[s]) for s in SOURCES]
        elif name in SOURCES:
            out.append((name, weight or DEFAULT_WEIGHTS[name]))
        elif Path(name).exists():
            out.append((name, weight or 1.0))
        else:
            raise ValueError(
                f"Unknown prompt source {name!r}. Use any of {', '.join(SOURCES)}, 'all', or a path to "
                "a JSONL file of user prompts."
            )
    if not out:
        raise ValueError("No prompt sources given; use e.g. --sources stdlib,synthetic,debian,magpie.")
    return out


def iter_prompts(
    sources: str | Sequence[str],
    limit: int,
    seed: int = 0,
    tokenizer: Any = None,
    model: Any = None,
    exclude: Sequence[str] = (),
) -> Iterator[Prompt]:
    """Mix prompt sources by weight into at most ``limit`` unique prompts (deterministic for a given seed).

    Sources are drawn lazily, so expensive ones (magpie generates with the target) only do the work needed.
    A source that runs dry is dropped and the others fill the remaining quota. ``exclude``: evaluation
    question files whose prompts the public sources (sharegpt, arena_hard, ifeval) must leave out.
    """
    from .public_prompts import public_prompts

    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}.")
    parsed = parse_sources(sources)
    if any(name == "magpie" for name, _ in parsed) and (model is None or tokenizer is None):
        raise ValueError("The magpie source needs the target: pass model= and tokenizer= (or drop 'magpie').")
    factories: dict[str, Callable[[], Iterator[Prompt]]] = {
        "stdlib": lambda: stdlib_prompts(seed),
        "synthetic": lambda: synthetic_prompts(seed),
        "debian": lambda: debian_prompts(seed),
        "magpie": lambda: magpie_prompts(model, tokenizer, seed=seed),
        **{
            name: (lambda name=name: public_prompts(name, seed=seed, exclude=exclude))
            for name in ("sharegpt", "arena_hard", "ifeval")
        },
    }
    active: list[tuple[str, float, Iterator[Prompt]]] = []
    for name, weight in parsed:
        if name in factories:
            gen = factories[name]()
        else:
            gen = iter(load_user_prompts(name))
        active.append((name, weight, gen))
    rng = random.Random(f"mix-{seed}")
    seen: set[str] = set()
    produced = 0
    while produced < limit and active:
        index = rng.choices(range(len(active)), weights=[w for _, w, _ in active])[0]
        try:
            rec = next(active[index][2])
        except StopIteration:
            logger.info("Prompt source %s is exhausted.", active[index][0])
            active.pop(index)
            continue
        if rec["id"] in seen:
            continue
        seen.add(rec["id"])
        produced += 1
        yield rec
    if produced < limit:
        logger.warning("Only %d of the %d requested prompts could be produced.", produced, limit)
