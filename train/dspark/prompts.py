"""The recipe's prompt sets, generated from templates (no download): chat, code, math and prose
user turns. `train` and `eval` draw their fillers from disjoint lists, so no held-out prompt (nor
any of flint's builtin benchmark prompts, which are excluded explicitly) is ever trained on.

    python3 prompts.py OUT_DIR [--train N]   writes OUT_DIR/prompts_{train,eval,eval24}.jsonl
(eval24: flint's 8 builtin prompts, then 4 held-out prompts per category)
"""
import argparse
import json
import pathlib
import random

ACTIVITIES = [
    "learn a new language", "start running", "keep a houseplant alive", "save money each month",
    "sleep better", "make friends in a new city", "prepare for a job interview", "learn to cook",
    "study for an exam", "start a vegetable garden", "organize a small kitchen", "learn to swim",
    "write a resume", "plan a weekend trip", "train a puppy", "reduce screen time",
    "start a podcast", "read more books", "stay focused while working from home", "learn chess",
    "bake bread", "paint with watercolors", "take better photos", "give a short speech",
    "ride a bike in traffic", "care for a cat", "choose a laptop", "learn to type faster",
]
ACTIVITIES_EVAL = [
    "learn to juggle", "start birdwatching", "repair a flat tire", "learn to knit",
    "host a dinner party", "start journaling", "care for a goldfish", "learn to sing",
]
CONCEPTS = [
    "photosynthesis", "gravity", "inflation", "a black hole", "the water cycle", "democracy",
    "a vaccine", "machine learning", "an earthquake", "the internet", "a rainbow", "electricity",
    "the immune system", "climate change", "a volcano", "compound interest", "evolution",
    "a solar eclipse", "recycling", "the stock market", "a computer virus", "DNA", "friction",
    "the moon's phases", "a tsunami", "supply and demand", "blood pressure", "an atom",
]
CONCEPTS_EVAL = [
    "a glacier", "the greenhouse effect", "an allergy", "a hurricane", "magnetism",
    "a credit score", "the seasons", "sound waves",
]
LANGS = ["Python", "JavaScript", "Rust", "C", "Java", "Go", "C++", "TypeScript"]
TASKS = [
    "checks whether a number is prime", "sorts a list of numbers", "counts the vowels in a string",
    "returns the largest element of a list", "checks whether a string is a palindrome",
    "computes the factorial of n", "removes duplicates from a list", "converts Celsius to Fahrenheit",
    "merges two sorted lists", "returns the sum of the digits of a number",
    "finds the second smallest number in a list", "counts the words in a sentence",
    "computes the average of a list", "reverses a string", "checks whether two strings are anagrams",
    "returns the greatest common divisor of two numbers", "flattens a nested list",
    "capitalizes the first letter of each word", "finds all even numbers in a list",
    "computes the power of a number without a library", "reads a file and counts its lines",
    "converts a binary string to an integer", "returns the n-th prime number",
]
TASKS_EVAL = [
    "rotates a list by k positions", "checks whether a year is a leap year",
    "computes the length of the longest word in a sentence", "returns the median of a list",
    "converts an integer to Roman numerals", "counts how often each letter appears in a string",
]
CHARACTERS = [
    "a young baker", "a retired sailor", "a curious robot", "a lonely dragon", "a brave girl",
    "an old farmer", "a lost dog", "a clever fox", "a tired doctor", "a shy student",
    "a traveling musician", "a grumpy wizard", "a little mouse", "a space explorer", "a fisherman",
]
CHARACTERS_EVAL = ["a night-shift nurse", "a stray kitten", "a clockmaker", "a young astronaut"]
EVENTS = [
    "finds a mysterious key", "gets lost in a forest", "meets a talking tree", "wins a contest",
    "loses something important", "moves to a new town", "discovers a hidden room",
    "helps a stranger", "learns a secret", "goes on a long journey", "makes an unlikely friend",
]
EVENTS_EVAL = ["misses the last train home", "receives a letter from the future", "finds an old map"]
PLACES = [
    "a busy market", "a quiet beach", "an old library", "a snowy forest", "a big city at night",
    "a desert", "a small harbor", "a train station", "a school playground", "a farm",
]
PLACES_EVAL = ["an abandoned amusement park", "a rainy bus stop", "a mountain lake"]
TOPICS = [
    "the ocean", "friendship", "the night sky", "spring", "a rainy day", "home", "music",
    "the city", "time", "the forest", "courage", "the sea", "childhood", "winter",
]
TOPICS_EVAL = ["a lighthouse", "the desert wind", "an empty house"]


def chat(r, acts, cons):
    a, c = r.choice(acts), r.choice(cons)
    return r.choice([
        f"What is a good way to {a}?", f"Give me three tips to {a}.",
        f"Explain {c} in simple terms.", f"What is {c}?", f"Why is it hard to {a}?",
        f"How would you explain {c} to a child?", f"What are the benefits of trying to {a}?",
        f"I want to {a}. Where should I begin?", f"Write a short list of steps to {a}.",
        f"What are common mistakes people make when they {a}?",
    ])


def code(r, tasks):
    lang, t = r.choice(LANGS), r.choice(tasks)
    return r.choice([
        f"Write a {lang} function that {t}.", f"How do I write a function that {t} in {lang}?",
        f"Write a {lang} program that {t}, with comments.",
        f"Show me a {lang} function that {t} and explain it.",
    ])


def math(r):
    a, b, c = r.randint(2, 99), r.randint(2, 99), r.randint(2, 20)
    return r.choice([
        f"What is {a} + {b}?", f"What is {a} times {c}?", f"What is {a * c} divided by {c}?",
        f"Solve for x: {c}x + {a} = {c * b + a}. Show each step.",
        f"A car travels {a * c} km in {c} hours. What is its average speed?",
        f"What is {c * 5}% of {a * 10}?",
        f"A rectangle is {a} cm wide and {b} cm long. What is its area?",
        f"Tom has {a} apples and gives away {min(a, b) // 2}. How many are left?",
        f"A shirt costs {a} dollars and is on sale for {c * 5}% off. What is the new price?",
        f"What is the perimeter of a square with sides of {c} meters?",
        f"If a pizza is cut into {c} slices and {min(c, 3)} are eaten, what fraction is left?",
    ])


def prose(r, chars, events, places, topics):
    ch, ev, pl, tp = r.choice(chars), r.choice(events), r.choice(places), r.choice(topics)
    return r.choice([
        f"Write a short story about {ch} who {ev}.", f"Describe {pl} early in the morning.",
        f"Write a poem about {tp}.", f"Write a short paragraph describing {pl}.",
        f"Write the opening of a fairy tale about {ch}.", f"Write a letter to a friend about {tp}.",
        f"Tell a bedtime story about {ch} who {ev}.", f"Describe {pl} in winter.",
    ])


# flint's builtin benchmark prompts (src/bench/spec/prompts.rs): never trained on.
BUILTIN = [
    ("chat", "What is a good way to start learning to play the guitar?"),
    ("chat", "Suggest three names for a small grey cat and say why."),
    ("code", "Write a Python function that returns the n-th Fibonacci number."),
    ("code", "Write a Rust function that reverses the order of the words in a sentence."),
    ("math", "A train travels 60 km in 45 minutes. What is its average speed in km/h?"),
    ("math", "Solve for x: 3x + 7 = 22. Show each step."),
    ("prose", "Write a short story about an old lighthouse keeper on his last night at work."),
    ("prose", "Describe a small mountain village on the first cold morning of autumn."),
]


def build(seed, n_train, n_eval_per_category=8):
    seen, ev = {p for _, p in BUILTIN}, []
    r = random.Random(seed)
    makers = {
        "chat": lambda: chat(r, ACTIVITIES, CONCEPTS), "code": lambda: code(r, TASKS),
        "math": lambda: math(r), "prose": lambda: prose(r, CHARACTERS, EVENTS, PLACES, TOPICS),
    }
    eval_makers = {
        "chat": lambda: chat(r, ACTIVITIES_EVAL, CONCEPTS_EVAL), "code": lambda: code(r, TASKS_EVAL),
        "math": lambda: math(r),
        "prose": lambda: prose(r, CHARACTERS_EVAL, EVENTS_EVAL, PLACES_EVAL, TOPICS_EVAL),
    }
    for cat, make in eval_makers.items():
        got = 0
        while got < n_eval_per_category:
            p = make()
            if p not in seen:
                seen.add(p)
                ev.append({"category": cat, "prompt": p})
                got += 1
    train, cats, tries = [], list(makers), 0
    while len(train) < n_train and tries < 50 * n_train:
        tries += 1
        cat = cats[len(train) % len(cats)]
        p = makers[cat]()
        if p not in seen:
            seen.add(p)
            train.append({"category": cat, "prompt": p})
    return train, ev


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--train", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    train, ev = build(a.seed, a.train)
    # The benchmark set: the builtin prompts, then the first 4 held-out prompts per category.
    bench = [{"category": c, "prompt": p} for c, p in BUILTIN]
    per = {}
    for r in ev:
        if per.setdefault(r["category"], 0) < 4:
            bench.append(r)
            per[r["category"]] += 1
    for name, rows in (("train", train), ("eval", ev), ("eval24", bench)):
        with open(out / f"prompts_{name}.jsonl", "w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
        print(f"{out}/prompts_{name}.jsonl: {len(rows)} prompts")


if __name__ == "__main__":
    main()
