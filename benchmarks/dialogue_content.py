"""The vocabulary of benchmarks/dialoguebench.py: life events two friends tell each other about,
the questions a reader would ask about them, and small talk.

Each :class:`Event` is told in three turns: the owner brings it up (``intro``: the event and when,
"last weekend"), the friend reacts (``react``), the owner gives the detail (``detail``: the answer,
``{v}``). Questions come in three wordings, picked per question:

- ``lex``: shares words with the detail turn (what BM25 is good at);
- ``bridge``: shares words only with the intro or the reaction, not with the detail turn (the
  answer is split over neighbouring turns);
- ``sem``: shares no content word with the three turns (a paraphrase: only meaning connects them).

The generator measures the overlap of every question with its evidence turns with the product's
own tokenizer and reports recall by measured overlap too, so these labels are checked, not trusted.
``lex`` has one question per ``detail`` wording (the same index). A "when did …" question names
the event with the intro's words (``did``) or without them (``action``); ``topic`` is how
a dated question names it, ``theme`` groups events for multi-hop and open-domain questions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Event:
    key: str
    theme: str
    intro: tuple[str, ...]
    react: tuple[str, ...]
    detail: tuple[str, ...]
    values: tuple[str, ...]
    lex: tuple[str, ...]
    bridge: tuple[str, ...]
    sem: tuple[str, ...]
    action: tuple[str, ...]
    topic: tuple[str, ...]
    did: tuple[str, ...] = ()  # how a "when did …" question names the event in the intro's words


WHEN = (
    "last weekend",
    "yesterday",
    "a few days ago",
    "last week",
    "on Saturday",
    "two weeks ago",
    "the other day",
    "on Friday evening",
)

EVENTS: tuple[Event, ...] = (
    Event(
        "puppy",
        "pets",
        (
            "Guess what, we brought home a puppy from the shelter {when}!",
            "Big news at our place: a rescue puppy joined the family {when}.",
        ),
        (
            "Oh my gosh, a puppy! What's the little one like?",
            "No way, a puppy?! Tell me everything.",
        ),
        (
            "She's a {v}, eight weeks old, and she already chews every shoe in the hallway.",
            "A tiny {v} with huge paws, and she sleeps on my feet every night.",
        ),
        ("golden retriever", "border collie", "beagle", "dachshund", "corgi", "labrador"),
        ("What kind of dog, eight weeks old and chewing every shoe, does {o} have?",),
        (
            "What kind of puppy did {o} get from the shelter?",
            "What is the rescue puppy of {o} like?",
        ),
        ("What breed is the dog that {o} adopted?", "Which breed is {o}'s new canine companion?"),
        ("adopt a dog", "take in a rescue dog"),
        ("the new dog",),
    ),
    Event(
        "cat",
        "pets",
        (
            "Our neighbour moved abroad {when} and left us their cat.",
            "We inherited a cat {when} when our neighbour moved to Spain.",
        ),
        ("A cat, wow! Is it settling in?", "Oh, that neighbour? How is the cat doing?"),
        (
            "He hides under the sofa all day and only comes out for {v}.",
            "Honestly he ignores us unless someone opens a tin of {v}.",
        ),
        ("tuna", "sardines", "salmon", "chicken liver"),
        ("What does the cat hiding under the sofa come out for at {o}'s place?",),
        ("What makes the cat {o} inherited from the neighbour show up?",),
        (
            "Which treat lures {o}'s shy feline out of hiding?",
            "What food tempts {o}'s timid kitty?",
        ),
        ("end up with a pet cat", "take over an animal from someone moving away"),
        ("the neighbour's animal",),
    ),
    Event(
        "violin",
        "music",
        (
            "I signed up for violin lessons {when}, finally doing it.",
            "So I started violin lessons {when}, at forty, can you believe it?",
        ),
        ("That's brave! How is it going?", "Violin? That's supposed to be so hard to learn!"),
        (
            "My teacher is a retired orchestra player and we're working on {v} already.",
            "It screeches a lot, but I can almost play {v} now.",
        ),
        ("Ode to Joy", "Twinkle Twinkle Little Star", "a Bach minuet", "Canon in D"),
        ("Which piece is {o} working on with the retired orchestra teacher?",),
        (
            "What can {o} play on the violin so far?",
            "Which tune is {o} practicing in violin lessons?",
        ),
        (
            "What song has {o} been learning on the string instrument?",
            "Which melody is {o} rehearsing as a new musician?",
        ),
        ("begin learning a string instrument", "start taking music classes"),
        ("music practice",),
    ),
    Event(
        "choir",
        "music",
        (
            "I joined a community choir {when}, we meet on Tuesdays.",
            "Tuesday nights are choir nights now, I joined one {when}.",
        ),
        ("A choir, how lovely! What do you sing?", "Do you have a good voice, then?"),
        (
            "We're rehearsing {v} for the winter concert and I sing alto.",
            "The director picked {v} for the spring show, and I got a small solo.",
        ),
        ("Hallelujah", "Bohemian Rhapsody", "Lean on Me", "Stand by Me"),
        ("Which song is {o} rehearsing for the concert, singing alto?",),
        ("What is the community choir of {o} singing?", "What does {o}'s choir sing on Tuesdays?"),
        (
            "Which number is {o}'s vocal group preparing for the show?",
            "What track are {o} and the other singers getting ready to perform?",
        ),
        ("become part of a singing group", "start singing with other people"),
        ("singing",),
    ),
    Event(
        "marathon",
        "sport",
        (
            "I ran my first half marathon {when}!",
            "Did I tell you I finished a half marathon {when}?",
        ),
        ("Amazing! Were you happy with your time?", "Wow, a half marathon! How do your legs feel?"),
        (
            "I crossed the line in {v}, which beat my goal by a few minutes.",
            "My watch said {v}, not bad for someone who hated jogging in school.",
        ),
        ("1 hour 58 minutes", "2 hours 4 minutes", "1 hour 49 minutes", "2 hours 11 minutes"),
        ("What time did {o}'s watch say when crossing the line?",),
        ("How fast did {o} finish the half marathon?", "What was {o}'s half marathon time?"),
        (
            "How long did the 21-kilometre race take {o}?",
            "What was {o}'s result in the long-distance run?",
        ),
        ("complete a long-distance race", "take part in a running event"),
        ("the race",),
    ),
    Event(
        "climbing",
        "sport",
        (
            "I tried bouldering at the new climbing gym {when}.",
            "A friend dragged me to a climbing gym {when} and I loved it.",
        ),
        ("Climbing! Weren't you scared of heights?", "Oh fun, is it hard on the arms?"),
        (
            "My forearms were burning, but I got to the top of a {v} route on my third try.",
            "I managed a {v} problem, the instructor said that's great for a beginner.",
        ),
        ("V2", "V3", "blue-graded", "yellow-graded"),
        ("Which route grade did {o} get to the top of on the third try?",),
        ("What did {o} manage at the climbing gym?", "How did {o} do at bouldering?"),
        (
            "What level of wall did {o} conquer as a newcomer?",
            "Which difficulty did {o} reach scaling walls indoors?",
        ),
        ("try scaling walls indoors", "take up a new vertical sport"),
        ("the gym",),
    ),
    Event(
        "lisbon",
        "travel",
        (
            "We just got back from a trip to Lisbon {when}.",
            "We spent a long weekend in Lisbon {when}.",
        ),
        ("Lisbon! I've always wanted to go. Highlights?", "Oh nice, how was Lisbon?"),
        (
            "The best part was {v}, I still dream about it.",
            "Honestly {v} made the whole trip for me.",
        ),
        (
            "the pastel de nata in Belem",
            "the tram 28 ride up the hill",
            "the sunset at Miradouro",
            "a fado night in Alfama",
        ),
        ("What was the best part that {o} still dreams about?",),
        ("What did {o} like most in Lisbon?", "What made the Lisbon trip for {o}?"),
        (
            "What was {o}'s favourite moment visiting Portugal's capital?",
            "Which experience stood out for {o} on the Portuguese getaway?",
        ),
        ("travel to Portugal", "go abroad to the Iberian coast"),
        ("the holiday",),
    ),
    Event(
        "camping",
        "travel",
        (
            "We went camping by the lake with the kids {when}.",
            "The whole family camped near the lake {when}.",
        ),
        (
            "Camping with kids, how brave! Did it rain?",
            "Oh I love the lake. Did the kids enjoy the camping?",
        ),
        (
            "The kids' favourite thing was {v}, they want to go back already.",
            "No rain, and we spent hours {v}, it was perfect.",
        ),
        (
            "roasting marshmallows",
            "catching frogs",
            "paddling in a canoe",
            "spotting owls at night",
        ),
        ("What was the kids' favourite thing, they want to go back already?",),
        ("What did {o}'s family enjoy on the camping trip?", "What did {o}'s kids do by the lake?"),
        (
            "How did {o}'s children spend time sleeping outdoors in a tent?",
            "Which activity delighted {o}'s little ones in the wilderness?",
        ),
        ("sleep in a tent with the family", "spend nights outdoors with the children"),
        ("the outdoor trip",),
    ),
    Event(
        "promotion",
        "work",
        ("I got promoted at work {when}!", "So, work news: they gave me the promotion {when}."),
        ("Congratulations! What's the new title?", "You deserved that promotion! What changes?"),
        (
            "I'm now {v}, which means more meetings but a bigger team.",
            "The new title is {v}, and I get my own budget.",
        ),
        (
            "lead data analyst",
            "head of customer support",
            "senior product designer",
            "engineering manager",
        ),
        ("What is {o}'s new title with more meetings and a bigger team?",),
        ("What position did {o} get promoted to?", "What is {o}'s role after the promotion?"),
        (
            "Which job did {o} move up to in the company?",
            "What does {o}'s career advancement involve, as a title?",
        ),
        ("move up the career ladder", "advance in the company"),
        ("the job",),
    ),
    Event(
        "new_job",
        "work",
        (
            "I handed in my notice {when}, I'm switching jobs.",
            "Big step {when}: I accepted a new job offer.",
        ),
        ("Whoa, where are you going?", "A new job! Are you nervous?"),
        (
            "I'll be working at {v} from next month, much shorter commute.",
            "It's at {v}, a smaller place but the people are lovely.",
        ),
        (
            "a solar energy startup",
            "the city library",
            "a children's hospital",
            "an architecture firm",
        ),
        ("Where will {o} be working from next month with the shorter commute?",),
        ("Which new job offer did {o} accept?", "Where is {o} switching jobs to?"),
        ("Which employer will {o} join?", "What organisation hired {o}?"),
        ("resign and change employers", "leave the old workplace"),
        ("the career change",),
    ),
    Event(
        "sourdough",
        "food",
        (
            "I've been baking sourdough since {when}, my starter is alive!",
            "My kitchen is a bakery now, I started making sourdough {when}.",
        ),
        ("Sourdough! Does it actually rise?", "You and bread, I love it. How is it turning out?"),
        (
            "My best loaf so far had {v} in it, the crust was perfect.",
            "I tried adding {v} and it came out amazing.",
        ),
        ("rosemary and olives", "walnuts and honey", "sun-dried tomatoes", "roasted garlic"),
        ("What did {o}'s best loaf have in it, with the perfect crust?",),
        (
            "What did {o} put in the best sourdough?",
            "What flavour of sourdough worked out for {o}?",
        ),
        (
            "Which ingredients went into {o}'s most successful homemade bread?",
            "What extras did {o} mix into the baked goods that came out well?",
        ),
        ("start making bread at home", "take up baking"),
        ("baking",),
    ),
    Event(
        "cooking_class",
        "food",
        (
            "I took a Thai cooking class {when}.",
            "I finally did that cooking class, Thai food, {when}.",
        ),
        ("Yum! What did you make?", "A cooking class sounds so fun, was the chef nice?"),
        (
            "We made {v} from scratch and I burned my tongue tasting it.",
            "The chef taught us {v} and I've made it twice since.",
        ),
        ("green curry", "pad thai", "tom yum soup", "mango sticky rice"),
        ("What dish did {o} make from scratch and burn a tongue tasting?",),
        ("What did {o} learn in the Thai cooking class?", "Which Thai dish did {o} cook in class?"),
        (
            "Which Asian recipe did {o} master with the instructor?",
            "What meal from Southeast Asia can {o} prepare now?",
        ),
        ("attend a culinary workshop", "learn a foreign cuisine"),
        ("food",),
    ),
    Event(
        "book_club",
        "reading",
        (
            "I joined a book club at the library {when}.",
            "The library book club started up again {when}, and I joined.",
        ),
        ("A book club! What are you reading?", "Oh, I'd love that. What's the first book?"),
        (
            "We're reading {v} and I can't put it down.",
            "This month it's {v}, and the discussion got heated.",
        ),
        ("Pachinko", "The Night Circus", "Circe", "Project Hail Mary", "Educated"),
        ("Which title can {o} not put down, with a heated discussion?",),
        ("What is {o}'s book club reading?", "Which book did the library club of {o} pick?"),
        (
            "What novel is {o}'s literary group discussing?",
            "Which story are {o} and the other readers going through?",
        ),
        ("become a member of a reading group", "start discussing literature with others"),
        ("reading",),
    ),
    Event(
        "painting",
        "art",
        (
            "I started painting with watercolours {when}.",
            "I bought a watercolour set {when} and started painting.",
        ),
        ("Ooh, what do you paint?", "Watercolours are tricky! Show me sometime?"),
        ("Mostly {v}, because they forgive my mistakes.", "I keep painting {v}, it's so calming."),
        ("sunsets over the sea", "wildflowers", "old barns", "city rooftops"),
        ("What does {o} keep painting because it forgives mistakes and is calming?",),
        ("What does {o} paint with the watercolours?", "What subjects does {o} like painting?"),
        (
            "What does {o} depict in the new art hobby?",
            "What scenes does {o} put on paper with the brush?",
        ),
        ("pick up an artistic hobby", "begin making pictures with a brush"),
        ("art",),
    ),
    Event(
        "pottery",
        "art",
        (
            "I signed up for a pottery workshop {when}.",
            "My pottery course began {when}, so much clay everywhere.",
        ),
        ("Pottery! Have you made anything yet?", "That sounds messy and fun. Any results?"),
        (
            "My first piece was {v}, a bit lopsided but I love it.",
            "I made {v} on the wheel, it's wobbly but mine.",
        ),
        ("a blue mug", "a small vase", "a fruit bowl", "a set of plates"),
        ("What was {o}'s first lopsided piece?",),
        ("What did {o} make in the pottery workshop?", "What came out of {o}'s pottery course?"),
        ("What did {o} shape out of clay?", "What ceramic object did {o} create?"),
        ("try working with clay", "take a ceramics course"),
        ("the clay class",),
    ),
    Event(
        "garden",
        "home",
        (
            "We planted a vegetable garden in the backyard {when}.",
            "The backyard is a vegetable patch now, we planted it {when}.",
        ),
        ("A garden! What are you growing?", "That's wonderful. Anything coming up yet?"),
        (
            "The {v} are already sprouting, the rest is slow.",
            "So far only the {v} look happy, the slugs got the others.",
        ),
        ("tomatoes", "zucchini", "green beans", "strawberries", "peppers"),
        ("What is already sprouting while the rest is slow for {o}?",),
        (
            "What is growing in {o}'s vegetable garden?",
            "What came up first in {o}'s backyard patch?",
        ),
        ("Which crop is thriving for {o}?", "Which produce is doing well in {o}'s plot at home?"),
        ("start growing food at home", "turn the yard into a planting bed"),
        ("the yard",),
    ),
    Event(
        "move",
        "home",
        (
            "We finally moved into the new apartment {when}.",
            "Moving day was {when}, we're in the new apartment!",
        ),
        ("Congrats! What's the new place like?", "Finally! Do you like the apartment?"),
        (
            "The best thing is {v}, I spend every morning there.",
            "I love {v}, it makes up for the tiny kitchen.",
        ),
        (
            "the balcony facing the park",
            "the big bay window",
            "the rooftop terrace",
            "the sunny reading nook",
        ),
        ("Where does {o} spend every morning at the new place?",),
        (
            "What does {o} like about the new apartment?",
            "What is the best part of {o}'s new apartment?",
        ),
        (
            "Which feature of the new home does {o} enjoy most?",
            "What does {o} love about the flat after relocating?",
        ),
        ("relocate to a different flat", "change homes"),
        ("the new home",),
    ),
    Event(
        "knee",
        "health",
        (
            "I twisted my knee playing football {when}.",
            "My knee gave out during a football game {when}.",
        ),
        ("Ouch! Is it serious?", "Oh no, your knee! Did you see a doctor?"),
        (
            "The doctor said it's {v}, so six weeks of physio.",
            "Turns out it's {v}, I'm on crutches for now.",
        ),
        ("a sprained ligament", "a torn meniscus", "just a bad bruise", "a strained tendon"),
        ("What did the doctor say, with six weeks of physio, for {o}?",),
        (
            "What happened to {o}'s knee?",
            "What did {o} find out about the knee injury from football?",
        ),
        (
            "What was {o}'s diagnosis after getting hurt in the match?",
            "How did the medical check describe {o}'s leg injury?",
        ),
        ("get injured during a game", "hurt a leg at sport"),
        ("the injury",),
    ),
    Event(
        "yoga",
        "health",
        (
            "I've been doing yoga every morning since {when}.",
            "Morning yoga is my new routine, started {when}.",
        ),
        ("Yoga every morning? Impressive.", "How is the yoga going, feeling more flexible?"),
        (
            "It really helped my {v}, I didn't expect that.",
            "The biggest change is my {v}, so much better.",
        ),
        ("back pain", "sleep", "stress levels", "posture"),
        ("What did it really help with that {o} did not expect?",),
        ("How has yoga helped {o}?", "What did the morning yoga routine change for {o}?"),
        (
            "What benefit has {o} noticed from the stretching practice?",
            "Which improvement came from {o}'s daily mindful exercise?",
        ),
        ("take up a daily stretching practice", "begin mindful exercise at dawn"),
        ("the routine",),
    ),
    Event(
        "spanish",
        "learning",
        (
            "I started Spanish classes at the community college {when}.",
            "I'm learning Spanish now, the classes started {when}.",
        ),
        ("¡Qué bien! Why Spanish?", "Spanish classes, nice! Is it hard?"),
        (
            "I want to talk to {v} in their own language.",
            "Mostly because of {v}, I want to surprise them.",
        ),
        (
            "my partner's grandmother",
            "the families at my volunteer job",
            "my new colleagues in Madrid",
            "my son's football coach",
        ),
        ("Whom does {o} want to talk to in their own language?",),
        ("Why is {o} taking Spanish classes?", "Who is {o} learning Spanish for?"),
        (
            "For whose sake is {o} studying a foreign tongue?",
            "What motivates {o} to pick up another language?",
        ),
        ("begin studying a foreign language", "enrol in language courses"),
        ("language study",),
    ),
    Event(
        "volunteer",
        "community",
        (
            "I started volunteering at the food bank {when}.",
            "I spent {when} volunteering at the food bank, my first shift.",
        ),
        ("That's so generous. What do you do there?", "The food bank, that's great. Is it busy?"),
        (
            "Mostly {v}, it's more tiring than it sounds.",
            "They put me on {v}, and I'm going back every Sunday.",
        ),
        (
            "sorting donated cans",
            "packing boxes for families",
            "driving deliveries",
            "running the sign-in desk",
        ),
        ("What is more tiring than it sounds for {o}?",),
        ("What does {o} do at the food bank?", "What is {o}'s task when volunteering?"),
        (
            "How does {o} help out at the charity for hungry families?",
            "What job does {o} do giving time to the needy?",
        ),
        ("give time to a charity", "help out the needy"),
        ("charity work",),
    ),
    Event(
        "podcast",
        "tech",
        (
            "My friend and I launched a podcast {when}!",
            "The podcast went live {when}, first episode is out.",
        ),
        ("A podcast! What's it about?", "No way, congrats! What's the podcast called?"),
        (
            "It's all about {v}, we interview a guest each week.",
            "We talk about {v}, which we're both obsessed with.",
        ),
        ("local history", "board games", "urban cycling", "true crime in small towns"),
        ("What do {o} and a friend interview a guest about each week?",),
        ("What is {o}'s podcast about?", "What topic does the podcast of {o} cover?"),
        (
            "What subject does {o}'s new audio show discuss?",
            "What are {o}'s recorded episodes focused on?",
        ),
        ("start an audio show", "begin recording episodes online"),
        ("the show",),
    ),
    Event(
        "sister_wedding",
        "family",
        (
            "My sister got married {when}, such a beautiful day.",
            "We had my sister's wedding {when}!",
        ),
        ("Aww, congratulations to her! Where was it?", "A wedding! Did you cry?"),
        ("It was at {v}, and I gave a speech.", "They did it at {v}, simple and perfect."),
        (
            "a vineyard outside town",
            "our grandparents' farm",
            "a lighthouse on the coast",
            "the botanical garden",
        ),
        ("Where was the place where {o} gave a speech?",),
        ("Where did {o}'s sister get married?", "Where was the wedding of {o}'s sister?"),
        (
            "Where did {o}'s sibling tie the knot?",
            "What venue hosted the ceremony for {o}'s sibling?",
        ),
        ("celebrate a sibling's marriage", "attend a family ceremony"),
        ("the family celebration",),
    ),
    Event(
        "grandma_birthday",
        "family",
        (
            "We threw a surprise party for my grandma's 90th {when}.",
            "Grandma turned 90 {when} and we surprised her.",
        ),
        ("90! That's incredible. Was she surprised?", "How sweet. What did you get her?"),
        (
            "We gave her {v}, and she cried happy tears.",
            "The gift was {v}, she hasn't stopped talking about it.",
        ),
        (
            "a photo album of her life",
            "a trip to the seaside",
            "a handmade quilt",
            "a new record player",
        ),
        ("What made her cry happy tears, the gift from {o}?",),
        (
            "What did {o} give grandma for her 90th?",
            "What present did {o}'s family get for the surprise party?",
        ),
        (
            "What gift did {o}'s elderly relative receive for turning ninety?",
            "How did {o} honour the old lady's milestone?",
        ),
        ("celebrate an elderly relative's milestone", "organise a big family celebration"),
        ("the family celebration",),
    ),
    Event(
        "movie",
        "movies",
        (
            "We watched a film at the open-air cinema {when}.",
            "The open-air cinema season opened {when} and we went.",
        ),
        ("Open-air cinema, how romantic! Which film?", "Ooh, was it cold? What did you see?"),
        (
            "They showed {v}, and half the audience sang along.",
            "It was {v}, I'd forgotten how good it is.",
        ),
        ("Mamma Mia", "The Princess Bride", "Jurassic Park", "Back to the Future"),
        ("What did they show with half the audience singing along?",),
        (
            "Which film did {o} watch at the open-air cinema?",
            "What was on at the open-air cinema {o} went to?",
        ),
        (
            "What movie did {o} see under the stars?",
            "Which picture did {o} enjoy outdoors at night?",
        ),
        ("see a movie outside", "go to an outdoor screening"),
        ("the outing",),
    ),
    Event(
        "bike",
        "sport",
        (
            "I bought a second-hand road bike {when}.",
            "I finally got a road bike {when}, second-hand but great.",
        ),
        ("A road bike! Where will you ride?", "Nice! Do you ride to work now?"),
        (
            "I ride {v} every Sunday morning, about sixty kilometres.",
            "My favourite loop goes {v}, so peaceful.",
        ),
        (
            "along the river to the old mill",
            "up to the reservoir",
            "around the coastal villages",
            "through the vineyards",
        ),
        ("Where does {o} ride about sixty kilometres every Sunday morning?",),
        ("Where does {o} ride the road bike?", "What route does {o} take on the new bike?"),
        ("Where does {o} go cycling on weekends?", "Which path does {o} pedal along?"),
        ("purchase a used bicycle", "get into cycling"),
        ("cycling",),
    ),
    Event(
        "concert",
        "music",
        (
            "We went to a jazz concert downtown {when}.",
            "I saw a jazz concert {when}, downtown at the old theatre.",
        ),
        ("Jazz! Who was playing?", "Was it good? I haven't been to a concert in ages."),
        (
            "It was {v}, and the saxophone solo gave me chills.",
            "They had {v} on stage, I bought the record after.",
        ),
        (
            "a quartet from New Orleans",
            "a young trio from Oslo",
            "an eight-piece big band",
            "a pianist from Havana",
        ),
        ("Who gave {o} chills with the saxophone solo?",),
        (
            "Who played at the jazz concert {o} went to?",
            "Which band did {o} see at the jazz concert?",
        ),
        (
            "Which performers did {o} watch at the live music night?",
            "Who entertained {o} at the old theatre show?",
        ),
        ("go to a live music show", "attend a performance in the city centre"),
        ("the night out",),
    ),
)

# The second ``lex`` question (for ``detail[1]``) and the ``did`` phrases of each event.
_MORE = {
    "puppy": (
        "Which puppy with huge paws sleeps on {o}'s feet every night?",
        ("bring home a puppy from the shelter", "get a rescue puppy"),
    ),
    "cat": (
        "Which tin does {o}'s cat stop ignoring everyone for?",
        ("inherit the neighbour's cat", "get the cat from the neighbour"),
    ),
    "violin": (
        "What can {o} almost play now, even though it screeches?",
        ("sign up for violin lessons", "start violin lessons"),
    ),
    "choir": (
        "What did the director pick for the spring show where {o} got a small solo?",
        ("join the community choir", "join a choir"),
    ),
    "marathon": (
        "What did {o}'s watch say, not bad for someone who hated jogging?",
        ("run a first half marathon", "finish a half marathon"),
    ),
    "climbing": (
        "Which problem did {o} manage that the instructor called great for a beginner?",
        ("try bouldering at the climbing gym", "go to a climbing gym"),
    ),
    "lisbon": (
        "What made the whole trip for {o}?",
        ("get back from the trip to Lisbon", "spend a weekend in Lisbon"),
    ),
    "camping": (
        "What did {o}'s family spend hours doing with no rain?",
        ("go camping by the lake with the kids", "camp near the lake"),
    ),
    "promotion": (
        "What new title gave {o} a budget of their own?",
        ("get promoted at work", "get the promotion"),
    ),
    "new_job": (
        "Where is the smaller place with lovely people that {o} is going to?",
        ("hand in the notice at work", "accept the new job offer"),
    ),
    "sourdough": (
        "What did {o} try adding that came out amazing?",
        ("start baking sourdough", "start making sourdough"),
    ),
    "cooking_class": (
        "What did the chef teach {o}, made twice since?",
        ("take the Thai cooking class", "do the cooking class"),
    ),
    "book_club": (
        "What is this month's book, with a heated discussion, for {o}?",
        ("join the book club at the library", "join the library book club"),
    ),
    "painting": (
        "What does {o} keep painting, because it is so calming?",
        ("start painting with watercolours", "buy a watercolour set"),
    ),
    "pottery": (
        "What did {o} make on the wheel, wobbly but theirs?",
        ("sign up for the pottery workshop", "begin the pottery course"),
    ),
    "garden": (
        "What looks happy in {o}'s garden after the slugs got the others?",
        ("plant the vegetable garden in the backyard", "plant a vegetable patch"),
    ),
    "move": (
        "What does {o} love that makes up for the tiny kitchen?",
        ("move into the new apartment", "have moving day"),
    ),
    "knee": (
        "What turned out to be the problem that put {o} on crutches?",
        ("twist a knee playing football", "hurt the knee in a football game"),
    ),
    "yoga": (
        "What is the biggest change for {o}, so much better?",
        ("start doing yoga every morning", "start the morning yoga routine"),
    ),
    "spanish": (
        "Whom does {o} want to surprise?",
        ("start Spanish classes", "begin learning Spanish"),
    ),
    "volunteer": (
        "What did the food bank put {o} on, going back every Sunday?",
        ("start volunteering at the food bank", "do a first food bank shift"),
    ),
    "podcast": (
        "What do {o} and a friend talk about, both obsessed with it?",
        ("launch a podcast", "put the first podcast episode out"),
    ),
    "sister_wedding": (
        "Where did {o}'s sister do it, simple and perfect?",
        ("go to the sister's wedding", "see the sister get married"),
    ),
    "grandma_birthday": (
        "What gift has {o}'s grandma not stopped talking about?",
        ("throw the surprise party for grandma", "surprise grandma for her 90th"),
    ),
    "movie": (
        "Which film had {o} forgotten was so good?",
        ("watch a film at the open-air cinema", "go to the open-air cinema"),
    ),
    "bike": (
        "Where does {o}'s favourite loop go, so peaceful?",
        ("buy a second-hand road bike", "get a road bike"),
    ),
    "concert": (
        "Who was on stage, whose record {o} bought after?",
        ("go to the jazz concert downtown", "see a jazz concert"),
    ),
}
EVENTS = tuple(replace(e, lex=e.lex + (_MORE[e.key][0],), did=_MORE[e.key][1]) for e in EVENTS)

# One question per theme about everything an owner did in it (multi-hop), and one that asks for
# an inference from it (open-domain).
MULTI: dict[str, tuple[str, ...]] = {
    "pets": ("Which animals has {o} taken in recently?", "What pets does {o} have now?"),
    "music": (
        "What musical activities has {o} been doing?",
        "How has {o} been spending time with music?",
    ),
    "sport": ("What physical activities has {o} tried lately?", "Which sports has {o} been doing?"),
    "travel": ("Where has {o} been travelling or staying outdoors?", "What trips has {o} taken?"),
    "work": ("What has changed in {o}'s career?", "What happened with {o}'s job?"),
    "food": ("What has {o} been cooking or baking?", "What food hobbies does {o} have?"),
    "art": ("What creative hobbies has {o} taken up?", "What has {o} been making as an artist?"),
    "home": ("What is new at {o}'s home?", "What has {o} done with the house?"),
    "health": (
        "What has happened with {o}'s health and fitness?",
        "How has {o}'s wellbeing changed?",
    ),
    "family": ("What family events did {o} celebrate?", "Which relatives of {o} had big moments?"),
}
OPEN: dict[str, tuple[str, ...]] = {
    "pets": (
        "Would {o} enjoy volunteering at an animal sanctuary?",
        "Is {o} likely to be an animal lover?",
    ),
    "music": (
        "Would {o} like a ticket to a symphony orchestra evening?",
        "Is {o} likely to enjoy a musical festival?",
    ),
    "sport": (
        "Would {o} be up for an athletic challenge like a triathlon?",
        "Is {o} an active, sporty person?",
    ),
    "travel": (
        "Would {o} enjoy a backpacking trip?",
        "Does {o} seem to like exploring new places?",
    ),
    "work": (
        "Is {o} ambitious about professional growth?",
        "Would {o} take on more responsibility at the office?",
    ),
    "food": ("Would {o} appreciate a gift card for a gourmet market?", "Is {o} a foodie?"),
    "art": ("Would {o} enjoy a visit to a craft fair?", "Is {o} a creative person?"),
    "home": (
        "Would {o} like a housewarming present for the garden or balcony?",
        "Is {o} settling down into domestic life?",
    ),
    "health": (
        "Should {o} be careful with strenuous exercise right now?",
        "Does {o} care about wellness?",
    ),
    "family": ("Is {o} close to relatives?", "Would {o} travel to attend a family reunion?"),
}

# Small talk: most turns of a conversation. Words of the events' themes occur here too, so a
# question's topic words are never unique to the answer.
SMALL_TALK = (
    "Hey {p}! Long time no talk, how have you been?",
    "Not bad, just busy with the usual stuff. You?",
    "Work has been crazy this week, so many meetings.",
    "The weather has been awful, it rained all weekend.",
    "I'm so tired today, I barely slept.",
    "Did you watch the game last night?",
    "I've been meaning to call you for ages.",
    "We should grab coffee sometime soon.",
    "Ha, that sounds exactly like you!",
    "That's so cool, I'm really happy for you.",
    "Oh no, that sounds stressful. Hang in there.",
    "Same here, honestly. Some weeks are just like that.",
    "My mum called again about the holidays, she's already planning.",
    "The kids have a school play next month, I need to sew a costume.",
    "I saw a cute dog at the park today and thought of getting one someday.",
    "I really need to get back into exercise, I've been so lazy.",
    "Have you read anything good lately? I need a new book.",
    "I tried a new cafe near the station, the coffee was decent.",
    "Our neighbours are renovating and the drilling starts at seven.",
    "I'm thinking about redecorating the living room.",
    "Traffic was terrible this morning, I was late again.",
    "I binge-watched a whole series on Sunday, no regrets.",
    "Work is fine, nothing new, same old projects.",
    "My phone broke, so I've been offline for a few days.",
    "We had friends over for dinner, I cooked way too much food.",
    "I keep forgetting to water my plants, they're barely alive.",
    "Music always cheers me up when I'm down.",
    "I want to travel more next year, maybe somewhere warm.",
    "My back hurts from sitting at the desk all day.",
    "The city is so busy in summer with all the tourists.",
    "Sorry I didn't answer earlier, it was a long day.",
    "I'm trying to eat healthier, less takeaway.",
    "Have you been to the farmers market on Saturday?",
    "The kids are growing up so fast, it's scary.",
    "I found an old photo of us from college, we looked so young!",
    "What are you up to this weekend?",
    "Nothing special, probably just relaxing at home.",
    "I might visit my parents, they live two hours away.",
    "Let me know how it goes, okay?",
    "Talk soon, take care!",
    "Bye for now, say hi to everyone!",
    "I have to run, dinner is ready. Catch up later?",
    "Honestly, I need a holiday.",
    "It's been a while since we went out dancing.",
    "I started a new series on the train, it's gripping.",
    "My cousin is visiting next week, so the house is chaos.",
    "Did you hear about the new bakery opening on the corner?",
    "I spent the whole evening fixing the leaking tap.",
    "The garden needs so much work, but I have no time.",
    "I bought new running shoes but haven't used them yet.",
    "Our team at work got a new manager, still getting used to her.",
    "I'm saving up for a new laptop, mine is ancient.",
    "The concert tickets were sold out in minutes, unbelievable.",
    "I'd love to learn to cook something fancy one day.",
    "My sister keeps sending me funny videos.",
    "I painted the fence last summer and it already needs another coat.",
    "Our car is at the garage again, third time this year.",
    "I love autumn, the colours are beautiful.",
    "Winter makes me want to stay under a blanket all day.",
    "How's your family doing?",
    "Everyone's good, thanks for asking.",
    "Tell me more about it next time, I want details!",
)
REPLIES = (
    "That's great to hear!",
    "Oh wow, really?",
    "I'm so glad, you deserve it.",
    "Haha, I can imagine.",
    "That sounds lovely.",
    "Oh no! I hope it gets better.",
    "You have to tell me more.",
    "I'm impressed, honestly.",
    "Same, I totally get it.",
    "Good for you!",
    "Wait, seriously?",
    "That made me smile.",
    "Sounds like a busy week.",
    "I'd love to see photos.",
)

NAMES = (
    "Caroline",
    "Melanie",
    "Jon",
    "Gina",
    "Tim",
    "John",
    "Maria",
    "Joanna",
    "Nate",
    "Audrey",
    "Andrew",
    "Evan",
    "Sam",
    "Calvin",
    "Dave",
    "Deborah",
    "Jolene",
    "James",
    "Priya",
    "Tom",
    "Lena",
    "Oscar",
    "Hannah",
    "Marcus",
    "Nadia",
    "Felix",
    "Rosa",
    "Victor",
    "Ines",
    "Arjun",
)
