"""Source ``synthetic``: template-built requests with random slots (math word problems with random numbers,
logic puzzles, writing and roleplay briefs, STEM/humanities questions, extraction, translation, advice)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

from .records import Prompt, make_prompt
from .words import (
    ADVICE_TOPICS,
    AUDIENCES,
    CODE_LANGUAGES,
    CODING_QUESTIONS,
    CODING_TASKS,
    FOREIGN_PHRASES,
    HUMANITIES_TOPICS,
    ITEMS,
    NAMES,
    ROLE_REQUESTS,
    ROLES,
    SENTENCES,
    STEM_CONCEPTS,
    WRITING_CONSTRAINTS,
    WRITING_FORMS,
    WRITING_TOPICS,
    pick_language,
)

_MATH_SUFFIXES = ["", "", " Show your reasoning step by step.", " Explain your answer.",
                  " Think it through carefully before answering.", " Give the final answer on its own line."]


def _money(x: float) -> str:
    return f"${x:,.2f}".replace(".00", "")


def _shopping_change(rng: random.Random, name: str, other: str) -> str:
    item, price = rng.choice(ITEMS)
    qty = rng.randint(2, 9)
    bill = rng.choice([20, 50, 100]) if qty * price < 20 else 100 if qty * price < 100 else 200
    return (
        f"{name} buys {qty} of the {item}s that cost {_money(price)} each and pays with a {_money(bill)} "
        f"bill. How much change does {name} get?"
    )


def _train_distance(rng: random.Random, name: str, other: str) -> str:
    speed, hours, hours2 = rng.randint(40, 120), rng.randint(2, 6), rng.randint(1, 9)
    return (
        f"A train travels {speed * hours} km in {hours} hours. At the same speed, how far does it travel "
        f"in {hours2} hours?"
    )


def _sale_price(rng: random.Random, name: str, other: str) -> str:
    price, pct = rng.randint(20, 400), rng.choice([10, 15, 20, 25, 30, 40, 50])
    return f"A jacket costs {_money(price)} and is on sale for {pct}% off. What is the sale price?"


def _interest(rng: random.Random, name: str, other: str) -> str:
    principal, rate, years = (
        rng.choice([500, 1000, 2500, 4000, 10000]),
        rng.randint(2, 8),
        rng.randint(2, 10),
    )
    style = rng.choice(["simple", "compound"])
    return (
        f"If you invest {_money(principal)} at {rate}% {style} annual interest, how much money will you "
        f"have after {years} years?"
    )


def _ages(rng: random.Random, name: str, other: str) -> str:
    young, factor, years = rng.randint(4, 20), rng.randint(2, 4), rng.randint(2, 10)
    total = young * factor + young + 2 * years
    return (
        f"{name} is {factor} times as old as {other}. In {years} years, the sum of their ages will be "
        f"{total}. How old is {other} now?"
    )


def _work_together(rng: random.Random, name: str, other: str) -> str:
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    return (
        f"{name} can paint a fence in {a} hours and {other} can paint the same fence in {b} hours. How long "
        f"will it take them if they work together?"
    )


def _geometry(rng: random.Random, name: str, other: str) -> str:
    w, h = rng.randint(3, 40), rng.randint(3, 40)
    # The list is built (drawing the fencing price) before choice picks from it.
    return rng.choice([
        f"A rectangle is {w} cm wide and {h} cm long. What are its area and perimeter?",
        f"A circle has a radius of {w} m. What are its area and circumference?",
        (
            f"A garden is {w} m by {h} m. Fencing costs {_money(rng.randint(3, 15))} per meter. "
            "How much does it cost to fence the whole garden?"
        ),
    ])


def _statistics(rng: random.Random, name: str, other: str) -> str:
    scores = [rng.randint(50, 100) for _ in range(rng.randint(5, 9))]
    return f"The test scores of a group of students are {', '.join(map(str, scores))}. Find the mean, median and range."


def _fractions(rng: random.Random, name: str, other: str) -> str:
    a, b, c, d = rng.randint(1, 9), rng.randint(2, 12), rng.randint(1, 9), rng.randint(2, 12)
    op = rng.choice(["+", "-", "×", "÷"])
    return f"Compute {a}/{b} {op} {c}/{d} and simplify the result."


def _combinatorics(rng: random.Random, name: str, other: str) -> str:
    n = rng.randint(5, 15)
    k = rng.randint(2, min(5, n - 1))
    return rng.choice([
        f"In how many ways can a committee of {k} people be chosen from {n} people?",
        (
            f"How many different ways can {k} runners finish first, second and so on in a race "
            f"with {n} runners?"
        ),
    ])


def _linear_equation(rng: random.Random, name: str, other: str) -> str:
    x = rng.randint(-12, 20)
    a = rng.choice([n for n in range(-9, 10) if n not in (0, 1)])
    b = rng.randint(-30, 30)
    return f"Solve for x: {a}x {'+' if b >= 0 else '-'} {abs(b)} = {a * x + b}."


def _ratio(rng: random.Random, name: str, other: str) -> str:
    a, b = rng.randint(1, 7), rng.randint(1, 7)
    total = (a + b) * rng.randint(2, 12)
    return (
        f"The ratio of cats to dogs at a shelter is {a}:{b}. If there are {total} animals in total, how "
        f"many are cats and how many are dogs?"
    )


def _percent_left(rng: random.Random, name: str, other: str) -> str:
    rate, hours, pct = rng.randint(10, 60), rng.randint(3, 10), rng.choice([20, 25, 40, 50, 60, 75])
    return (
        f"A bakery bakes {rate} loaves of bread per hour for {hours} hours and sells {pct}% of them by "
        f"noon. How many loaves are left?"
    )


def _arithmetic_sequence(rng: random.Random, name: str, other: str) -> str:
    a, d, n = rng.randint(-5, 20), rng.randint(2, 9), rng.randint(10, 60)
    return (
        f"What is the {n}th term of the arithmetic sequence {a}, {a + d}, {a + 2 * d}, {a + 3 * d}, ...? "
        f"What is the sum of its first {n} terms?"
    )


def _probability(rng: random.Random, name: str, other: str) -> str:
    red, blue = rng.randint(2, 9), rng.randint(2, 9)
    return (
        f"A bag contains {red} red marbles and {blue} blue marbles. Two marbles are drawn without "
        f"replacement. What is the probability that both are red?"
    )


def _number_theory(rng: random.Random, name: str, other: str) -> str:
    a, b = rng.randint(12, 240), rng.randint(12, 240)
    return rng.choice([
        f"Find the greatest common divisor and the least common multiple of {a} and {b}.",
        f"Is {a * 2 + 1} a prime number? Explain how you checked.",
    ])


def _unit_conversion(rng: random.Random, name: str, other: str) -> str:
    amount = rng.randint(3, 250)
    unit = rng.choice([
        ("miles", "kilometers"),
        ("kilograms", "pounds"),
        ("liters", "gallons"),
        ("degrees Fahrenheit", "degrees Celsius"),
        ("inches", "centimeters"),
    ])
    return f"Convert {amount} {unit[0]} to {unit[1]}."


def _money_steps(rng: random.Random, name: str, other: str) -> str:
    start, spend, earn = rng.randint(20, 200), rng.randint(5, 60), rng.randint(5, 80)
    return (
        f"{name} had {_money(start)}. {name} spent {_money(spend)} on groceries, then earned "
        f"{_money(earn)} babysitting, and finally gave half of the money to {other}. How much money does "
        f"{name} have now?"
    )


# One builder per problem kind. The order is part of the output: ``rng.randrange(len(_MATH_KINDS))`` picks
# the builder, so reordering, inserting or removing one changes every prompt after the first such pick, and
# the shipped drafters' training prompts are checked against seed 0's output (tests/test_prompts.py).
_MATH_KINDS: tuple[Callable[[random.Random, str, str], str], ...] = (
    _shopping_change, _train_distance, _sale_price, _interest, _ages, _work_together, _geometry, _statistics,
    _fractions, _combinatorics, _linear_equation, _ratio, _percent_left, _arithmetic_sequence, _probability,
    _number_theory, _unit_conversion, _money_steps,
)


def _math_problem(rng: random.Random) -> str:
    """A word problem with random numbers (always solvable with whole or simple decimal answers)."""
    name = rng.choice(NAMES)
    other = rng.choice([n for n in NAMES if n != name])
    text = _MATH_KINDS[rng.randrange(len(_MATH_KINDS))](rng, name, other)
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
        groups = ["cats", "mammals", "pets", "birds", "animals", "dogs", "reptiles", "fish", "flowers",
                  "plants", "roses", "trees"]
        x, y, z = rng.sample(groups, 3)
        text = f"All {x} are {y}. Some {y} are {z}. Can we conclude that some {x} are {z}? Explain."
    elif kind == 2:
        days = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
        text = (
            f"If today is {rng.choice(days)}, what day of the week will it be in {rng.randint(3, 400)} days?"
        )
    elif kind == 3:
        word = rng.choice(["strawberry", "banana", "mississippi", "committee", "bookkeeper", "programming",
                           "assessment", "parallel", "occurrence", "balloon"])
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
    category = rng.choice(["math", "math", "reasoning", "writing", "writing", "roleplay", "stem", "stem",
                           "humanities", "coding", "coding", "extraction", "translation", "advice"])
    if category == "math":
        return category, _math_problem(rng)
    if category == "reasoning":
        return category, _reasoning_problem(rng)
    if category == "writing":
        form, topic = rng.choice(WRITING_FORMS), rng.choice(WRITING_TOPICS)
        return category, rng.choice([
            f"Write {form} about {topic}.",
            f"Compose {form} on the theme of {topic}.",
            f"Can you write {form} about {topic}?",
        ]) + rng.choice(WRITING_CONSTRAINTS)
    if category == "roleplay":
        role = rng.choice(ROLES)
        request = rng.choice(ROLE_REQUESTS).format(topic=rng.choice(ADVICE_TOPICS + WRITING_TOPICS))
        return category, rng.choice([
            f"Pretend you are {role}. {request}",
            f"I want you to act as {role}. Stay in character. {request}",
            f"Roleplay as {role}. {request}",
        ])
    if category == "stem":
        concept = rng.choice(STEM_CONCEPTS)
        other = rng.choice([c for c in STEM_CONCEPTS if c != concept])
        return category, rng.choice([
            f"Explain {concept} in simple terms.",
            f"What is {concept}? Give an example.",
            f"Explain {concept} to {rng.choice(AUDIENCES)}.",
            f"What are common misconceptions about {concept}?",
            f"How is {concept} used or observed in everyday life?",
            f"Compare {concept} and {other}.",
            f"Write three exam questions about {concept}, with answers.",
        ])
    if category == "humanities":
        topic = rng.choice(HUMANITIES_TOPICS)
        other = rng.choice([t for t in HUMANITIES_TOPICS if t != topic])
        return category, rng.choice([
            f"What were the main causes and consequences of {topic}?",
            f"Summarize the key ideas of {topic}.",
            f"Why does {topic} still matter today?",
            f"Write an essay outline about {topic}.",
            f"Compare {topic} and {other}.",
            f"Explain {topic} to {rng.choice(AUDIENCES)}.",
            f"Give three arguments for and three against the importance of {topic}.",
        ])
    if category == "coding":
        lang = rng.choice(["Python", "Python", "Python"] + CODE_LANGUAGES)
        task = rng.choice(CODING_TASKS)
        return category, rng.choice([
            f"Write a {lang} function that {task}.",
            f"Implement a function in {lang} that {task}, and explain its time complexity.",
            f"Write a {lang} function that {task}. Include a few test cases.",
            rng.choice(CODING_QUESTIONS).format(lang=lang),
        ])
    if category == "extraction":
        return category, _extraction_task(rng)
    if category == "translation":
        lang = pick_language(rng)
        return category, rng.choice([
            f"Translate into {lang}: {rng.choice(SENTENCES)}",
            f'How do you say "{rng.choice(SENTENCES)}" in {lang}?',
            f'What does "{rng.choice(FOREIGN_PHRASES)}" mean in English?',
            f"Translate these sentences into {lang}:\n" + "\n".join(rng.sample(SENTENCES, 3)),
        ])
    topic = rng.choice(ADVICE_TOPICS)
    return "advice", rng.choice([
        f"How can I {topic}?",
        f"Give me five practical tips to {topic}.",
        f"Make a {rng.randint(2, 8)}-week plan to help me {topic}.",
        f"What are the most common mistakes people make when they try to {topic}?",
    ])


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

