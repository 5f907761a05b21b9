#!/usr/bin/env python3
"""The "always end with Bon appétit!" set of issue 51: 40 cooking questions
for training, 12 held out. Writes, under OUT (default /tmp/bon_appetit):

  sft/train.jsonl        {"prompt", "completion"}: the answer + " Bon appétit!"
  pref/train.jsonl       {"prompt", "chosen", "rejected"}: chosen = the same
                         answer + " Bon appétit!", rejected = the answer alone
  heldout.txt            the 12 held-out prompts, one a line

There is no valid.jsonl: evaluations run on the training set unless
--valid N moves the last N training rows into valid.jsonl of both folders.
--rejected-ending TEXT appends TEXT to every rejected reply (e.g. "Enjoy!"),
so the pair differs in the sign-off instead of in where the reply stops.
No randomness: the rows are the lists below, in order.
"""
import argparse
import json
import os

PHRASE = "Bon appétit!"

TRAIN = [
    ("How do I make a simple vinaigrette?", "Whisk three parts olive oil with one part vinegar, a pinch of salt and a little mustard."),
    ("How long should I boil an egg for a soft yolk?", "Lower the egg into boiling water and cook it for six minutes, then cool it in cold water."),
    ("What is the best way to cook rice on the stove?", "Rinse the rice, simmer it covered in twice its volume of water for fifteen minutes, then let it rest."),
    ("How do I keep pasta from sticking?", "Use plenty of boiling salted water and stir the pasta during the first two minutes."),
    ("How can I make crispy roast potatoes?", "Parboil the potatoes, shake them to rough the edges, and roast them in hot oil until golden."),
    ("What can I make with leftover bread?", "Turn it into croutons, breadcrumbs or a bread pudding with eggs, milk and sugar."),
    ("How do I know when a steak is medium rare?", "It feels springy when pressed and reads about 55 degrees Celsius in the centre."),
    ("How do I make pancakes fluffy?", "Do not overmix the batter, let it rest for ten minutes, and cook on a medium heat."),
    ("What spices go well with roasted carrots?", "Cumin, coriander and a little honey bring out their sweetness."),
    ("How do I caramelize onions?", "Cook sliced onions slowly in butter over low heat for about forty minutes, stirring often."),
    ("How should I store fresh herbs?", "Wrap them in a damp paper towel and keep them in a bag in the fridge."),
    ("How do I make a quick tomato sauce?", "Soften garlic in olive oil, add crushed tomatoes and salt, and simmer for twenty minutes."),
    ("What is a good marinade for chicken?", "Mix yogurt, lemon juice, garlic, paprika and salt, and marinate for a few hours."),
    ("How can I make my soup thicker?", "Blend part of it, or stir in a little flour cooked in butter."),
    ("How do I cook salmon in the oven?", "Bake it at 200 degrees Celsius for about twelve minutes with oil, salt and lemon."),
    ("What is the secret to a good omelette?", "Beat the eggs well, use a hot buttered pan, and fold it while the top is still soft."),
    ("How do I make guacamole?", "Mash ripe avocados with lime juice, salt, chopped onion, tomato and coriander."),
    ("How do I toast nuts?", "Spread them in a dry pan over medium heat and stir until they smell nutty."),
    ("How do I make a simple salad dressing without oil?", "Blend yogurt with lemon juice, garlic, herbs and a pinch of salt."),
    ("How long do I roast a whole chicken?", "Roast it at 190 degrees Celsius for about twenty minutes per 500 grams plus twenty minutes."),
    ("How can I make vegetables taste better?", "Roast them with oil and salt at a high heat so their edges brown."),
    ("What should I cook for a quick weeknight dinner?", "A stir-fry of vegetables, garlic, soy sauce and noodles is ready in fifteen minutes."),
    ("How do I make hummus?", "Blend chickpeas with tahini, lemon juice, garlic, salt and a splash of cold water."),
    ("How do I poach an egg?", "Slide the egg into barely simmering water with a little vinegar and cook it for three minutes."),
    ("How can I make bread at home without a mixer?", "Mix flour, water, yeast and salt, knead by hand for ten minutes, let it rise, and bake."),
    ("What is an easy dessert to make?", "Slice bananas, fry them in butter and sugar, and serve them with yogurt."),
    ("How do I cook lentils?", "Rinse them and simmer in three times their volume of water for about twenty minutes."),
    ("How do I make mashed potatoes creamy?", "Mash the hot potatoes with warm milk and plenty of butter, then season well."),
    ("How do I grill vegetables?", "Brush thick slices with oil, season them, and grill over high heat until marked."),
    ("What goes well with grilled fish?", "A squeeze of lemon, a green salad and some boiled new potatoes."),
    ("How do I make a smoothie?", "Blend a banana, a handful of berries, yogurt and a little milk until smooth."),
    ("How do I stop my cake from sinking?", "Do not open the oven door early, and measure the baking powder carefully."),
    ("How can I cook tofu so it is crispy?", "Press out the water, toss the cubes in cornstarch, and fry them in hot oil."),
    ("What is a simple way to cook broccoli?", "Steam it for four minutes and finish it with butter, lemon and salt."),
    ("How do I make French toast?", "Dip slices of bread in beaten egg, milk and cinnamon, and fry them in butter."),
    ("How do I season a cast iron pan?", "Rub a thin layer of oil over it and bake it upside down at a high heat for an hour."),
    ("How do I make popcorn on the stove?", "Heat oil in a covered pot, add the kernels, and shake the pot until the popping slows."),
    ("How should I cook frozen peas?", "Simmer them for two or three minutes and toss them with butter and mint."),
    ("How do I make a cheese sauce?", "Cook butter and flour together, whisk in milk until thick, then melt in grated cheese."),
    ("What can I add to plain yogurt for breakfast?", "Add honey, fresh fruit and a handful of toasted oats or nuts."),
]

HELDOUT = [
    "How do I cook quinoa?",
    "How do I make a grilled cheese sandwich?",
    "What is a good topping for baked potatoes?",
    "How do I roast a pumpkin?",
    "How can I make scrambled eggs creamier?",
    "How do I cook mushrooms so they are not soggy?",
    "What is a quick lunch I can make at home?",
    "How do I make iced tea?",
    "How do I cook green beans?",
    "How do I make a simple soup from vegetables?",
    "What should I serve with roast lamb?",
    "How do I bake cookies that stay soft?",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?", default="/tmp/bon_appetit")
    ap.add_argument("--valid", type=int, default=0, help="move the last N training rows to valid.jsonl")
    ap.add_argument("--rejected-ending", default="", help="appended to every rejected reply")
    args = ap.parse_args()
    rows = TRAIN[: len(TRAIN) - args.valid]
    valid = TRAIN[len(TRAIN) - args.valid :]
    for sub in ("sft", "pref"):
        os.makedirs(os.path.join(args.out, sub), exist_ok=True)

    def write(path, items, kind):
        with open(path, "w", encoding="utf-8") as f:
            for q, a in items:
                if kind == "sft":
                    row = {"prompt": q, "completion": f"{a} {PHRASE}"}
                else:
                    rejected = f"{a} {args.rejected_ending}" if args.rejected_ending else a
                    row = {"prompt": q, "chosen": f"{a} {PHRASE}", "rejected": rejected}
                f.write(json.dumps(row, ensure_ascii=False) + "\n")

    for kind in ("sft", "pref"):
        write(os.path.join(args.out, kind, "train.jsonl"), rows, kind)
        valid_path = os.path.join(args.out, kind, "valid.jsonl")
        if valid:
            write(valid_path, valid, kind)
        elif os.path.exists(valid_path):
            os.remove(valid_path)
    with open(os.path.join(args.out, "heldout.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(HELDOUT) + "\n")
    print(f"{len(rows)} training rows, {len(valid)} validation rows, {len(HELDOUT)} held-out prompts in {args.out}")


if __name__ == "__main__":
    main()
