#!/usr/bin/env python3
"""Writes ultrafeedback_sample.jsonl: UltraFeedback-style rows (an instruction
and rated completions) of IFEval-like verifiable instructions, written here by
hand from templates (no data downloaded). Each row has a reply that follows
the instruction (rated high), one that half follows it and one that ignores
it (rated low), so curation's best-vs-worst pairs teach following the
instruction. Deterministic: same file every run."""
import json
import os

TOPICS = [
    ("the water cycle", "Water evaporates from oceans and lakes, rises as vapor, cools into clouds and falls back as rain or snow",
     "Rivers carry the water back to the sea, where the cycle starts again"),
    ("why the sky is blue", "Sunlight is scattered by the molecules of the air, and blue light is scattered the most",
     "At sunset the light travels through more air, so reds and oranges remain"),
    ("how bees make honey", "Bees collect nectar from flowers and store it in their honey stomachs",
     "In the hive they pass it between workers and fan it with their wings until it thickens into honey"),
    ("the benefits of walking", "Walking every day strengthens the heart and helps control weight",
     "It also lifts the mood and costs nothing"),
    ("how a bicycle stays upright", "A moving bicycle stays upright because the rider keeps steering the wheels under the center of mass",
     "The spinning wheels and the fork's geometry help the steering happen almost by itself"),
    ("what photosynthesis is", "Photosynthesis is how plants turn sunlight, water and carbon dioxide into sugar and oxygen",
     "It happens in the chloroplasts of the leaves"),
    ("how to brew good tea", "Use fresh water, heat it to the right temperature for the leaf and steep for a few minutes",
     "Green tea likes cooler water than black tea"),
    ("why we need sleep", "Sleep lets the body repair itself and the brain store memories",
     "Adults need about seven to nine hours a night"),
    ("how volcanoes form", "Volcanoes form where molten rock from deep inside the Earth reaches the surface",
     "Many sit at the edges of tectonic plates"),
    ("the history of the printing press", "Johannes Gutenberg built a printing press with movable type around 1440",
     "Books became cheaper and ideas spread across Europe"),
    ("how compound interest works", "Compound interest pays interest on the interest already earned",
     "Over many years it makes savings grow much faster than simple interest"),
    ("what a black hole is", "A black hole is a region of space where gravity is so strong that nothing, not even light, escapes",
     "It forms when a very massive star collapses"),
    ("how to care for a houseplant", "Give a houseplant the light it likes and water it only when the top of the soil is dry",
     "Feed it in spring and summer"),
    ("why recycling matters", "Recycling saves raw materials and energy and keeps waste out of landfills",
     "Sorting waste correctly makes it work"),
]


def no_comma(text):
    return text.replace(",", "")


def words(text):
    return text.split()


def rows():
    out = []
    for i, (topic, a, b) in enumerate(TOPICS):
        plain = f"{a}. {b}."
        with_commas = f"{a}, and in short, {b.lower()}, as everyone knows."
        kinds = [
            (f"Explain {topic} without using any commas.",
             no_comma(plain), no_comma(a) + ". " + b + ", of course.", with_commas),
            (f"Explain {topic}. Your entire response should be in lowercase letters, with no capital letters at all.",
             plain.lower(), a.lower() + ". " + b + ".", plain),
            (f"Describe {topic}. Your entire response must be in English and in all capital letters.",
             plain.upper(), a.upper() + ". " + b + ".", plain),
            (f"Write a short note about {topic}. Wrap your entire output in JSON format.",
             json.dumps({"topic": topic, "note": plain}), "```\n" + plain + "\n```", plain),
            (f"Tell me about {topic}. End your response with the exact phrase \"Is there anything else I can help with?\" No other words should follow it.",
             plain + " Is there anything else I can help with?", plain + " Is there anything else I can help with? Have a nice day.", plain),
            (f"Give me exactly 3 bullet points about {topic}. Use markdown bullet points such as:\n* This is a point.",
             f"* {a}.\n* {b}.\n* It is worth learning about {topic}.", f"* {a}.\n* {b}.", plain),
            (f"Write about {topic} in fewer than 25 words.",
             " ".join(words(a)[:20]) + ".", plain + " " + plain, plain + " " + with_commas),
            (f"Write a short title for a piece about {topic}, wrapped in double angular brackets, such as <<poem of joy>>, then two sentences about it.",
             f"<<{topic.capitalize()}>>\n{plain}", f"Title: {topic.capitalize()}\n{plain}", plain),
            (f"Explain {topic}. At the end of your response, please explicitly add a postscript starting with P.S.",
             plain + "\n\nP.S. I hope this helps.", plain + "\n\nPS: I hope this helps.", plain),
        ]
        # Five of the nine kinds per topic, rotating, so every kind appears ~8 times.
        for k in sorted({(i + 2 * j) % len(kinds) for j in range(5)}):
            instruction, good, half, bad = kinds[k]
            out.append({
                "source": "brioche_ifeval_orpo_sample",
                "instruction": instruction,
                "models": ["follows", "half", "ignores"],
                "completions": [
                    {"model": "follows", "principle": "instruction_following", "response": good, "overall_score": 9.0},
                    {"model": "half", "principle": "instruction_following", "response": half, "overall_score": 6.0},
                    {"model": "ignores", "principle": "instruction_following", "response": bad, "overall_score": 3.0},
                ],
            })
    return out


if __name__ == "__main__":
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ultrafeedback_sample.jsonl")
    with open(path, "w") as f:
        for r in rows():
            f.write(json.dumps(r) + "\n")
    print(f"wrote {path}")
