"""String utilities: case conversion, slugs, wrapping, word counts, templates, validators."""

from __future__ import annotations

from loongsage.tasks.swe.suite.spec import Bug, SuiteTask, source

TEXTCASE = {
    "textcase.py": source('''
        """Converting between naming styles."""


        def capitalize_words(text):
            """"hello big world" -> "Hello Big World" (spacing kept as it is)."""
            return " ".join(word[:1].upper() + word[1:] for word in text.split(" "))


        def snake_to_camel(name):
            """"user_id" -> "userId"."""
            head, *rest = name.split("_")
            return head + "".join(part.capitalize() for part in rest)


        def camel_to_snake(name):
            """"userName" -> "user_name"; a leading capital gets no underscore."""
            out = []
            for index, char in enumerate(name):
                if char.isupper() and index > 0:
                    out.append("_")
                out.append(char.lower())
            return "".join(out)
    '''),
    "tests/test_textcase.py": source("""
        from textcase import camel_to_snake, capitalize_words, snake_to_camel


        def test_capitalize_words():
            assert capitalize_words("hello big world") == "Hello Big World"


        def test_capitalize_keeps_double_spaces():
            assert capitalize_words("a  b") == "A  B"


        def test_snake_to_camel():
            assert snake_to_camel("user_id") == "userId"


        def test_snake_to_camel_single_word():
            assert snake_to_camel("name") == "name"


        def test_camel_to_snake():
            assert camel_to_snake("userName") == "user_name"


        def test_camel_to_snake_leading_capital():
            assert camel_to_snake("UserName") == "user_name"
    """),
}

SLUGIFY = {
    "slugify.py": source('''
        """URL slugs from titles."""
        import re

        _WORD = re.compile(r"[a-z0-9]+")


        def slugify(text, separator="-", max_length=None):
            """"Hello, World!" -> "hello-world"; cut to max_length without a dangling separator."""
            words = _WORD.findall(text.lower())
            slug = separator.join(words)
            if max_length is not None:
                slug = slug[:max_length].rstrip(separator)
            return slug
    '''),
    "tests/test_slugify.py": source("""
        from slugify import slugify


        def test_lowercase_words():
            assert slugify("hello world") == "hello-world"


        def test_capitals_and_punctuation():
            assert slugify("Hello, World!") == "hello-world"


        def test_custom_separator():
            assert slugify("a b c", separator="_") == "a_b_c"


        def test_max_length_cuts_at_word_end():
            assert slugify("hello world", max_length=6) == "hello"


        def test_max_length_longer_than_slug():
            assert slugify("hi there", max_length=50) == "hi-there"
    """),
}

WRAP = {
    "wrap.py": source('''
        """Greedy word wrapping."""


        def wrap(text, width):
            """Lines of at most `width` characters (a longer word gets a line of its own)."""
            if width < 1:
                raise ValueError("width must be at least 1")
            lines, current = [], ""
            for word in text.split():
                if current and len(current) + 1 + len(word) > width:
                    lines.append(current)
                    current = word
                else:
                    current = f"{current} {word}" if current else word
            if current:
                lines.append(current)
            return lines
    '''),
    "tests/test_wrap.py": source("""
        import pytest

        from wrap import wrap


        def test_fits_on_one_line():
            assert wrap("a short text", 20) == ["a short text"]


        def test_line_exactly_width():
            assert wrap("aaa bbb ccc", 7) == ["aaa bbb", "ccc"]


        def test_several_lines():
            assert wrap("one two three four five", 9) == ["one two", "three", "four five"]


        def test_long_word_alone():
            assert wrap("tiny enormousword", 5) == ["tiny", "enormousword"]


        def test_empty_text():
            assert wrap("", 10) == []


        def test_bad_width():
            with pytest.raises(ValueError):
                wrap("x", 0)
    """),
}

WORDFREQ = {
    "wordfreq.py": source('''
        """Word frequencies of a text."""
        from collections import Counter

        _PUNCTUATION = ".,;:!?\\"'()"


        def word_counts(text):
            words = (word.strip(_PUNCTUATION).lower() for word in text.split())
            return Counter(word for word in words if word)


        def top_words(text, n):
            """The n most frequent words, most frequent first, ties in alphabetical order."""
            ranked = sorted(word_counts(text).items(), key=lambda item: (-item[1], item[0]))
            return [word for word, _ in ranked[:n]]
    '''),
    "tests/test_wordfreq.py": source("""
        from wordfreq import top_words, word_counts


        def test_counts_ignore_case_and_punctuation():
            assert word_counts("The cat. the CAT, a dog!") == {"the": 2, "cat": 2, "a": 1, "dog": 1}


        def test_top_words_by_frequency():
            assert top_words("b a b c b a", 2) == ["b", "a"]


        def test_top_words_ties_alphabetical():
            assert top_words("pear apple fig", 2) == ["apple", "fig"]


        def test_top_words_more_than_available():
            assert top_words("x y", 5) == ["x", "y"]
    """),
}

TEMPLATE = {
    "minitemplate.py": source('''
        """{{ name }} placeholders filled from a mapping."""
        import re

        _PLACEHOLDER = re.compile(r"\\{\\{\\s*(\\w+)\\s*\\}\\}")


        def render(template, values, strict=True):
            """Replace each placeholder by str(values[name]). A missing name raises KeyError
            when strict, else the placeholder is left as it is."""

            def substitute(match):
                name = match.group(1)
                if name in values:
                    return str(values[name])
                if strict:
                    raise KeyError(f"no value for {name!r}")
                return match.group(0)

            return _PLACEHOLDER.sub(substitute, template)
    '''),
    "tests/test_minitemplate.py": source("""
        import pytest

        from minitemplate import render


        def test_render_compact_placeholder():
            assert render("Hi {{name}}!", {"name": "Ada"}) == "Hi Ada!"


        def test_render_spaced_placeholder():
            assert render("Hi {{ name }}!", {"name": "Ada"}) == "Hi Ada!"


        def test_render_number():
            assert render("{{n}} items", {"n": 3}) == "3 items"


        def test_missing_strict():
            with pytest.raises(KeyError):
                render("{{x}}", {})


        def test_missing_lenient_keeps_placeholder():
            assert render("a {{ x }} b", {}, strict=False) == "a {{ x }} b"
    """),
}

VALIDATORS = {
    "validators.py": source('''
        """Checks and normalisation for user input."""
        import re

        _EMAIL = re.compile(r"^[\\w.+-]+@[\\w-]+(\\.[\\w-]+)+$")


        def is_email(text):
            """True for "name@example.org"; a domain needs at least one dot."""
            return bool(_EMAIL.match(text))


        def normalize_phone(text):
            """A 10-digit North American number as "(555) 123-4567"; a leading 1 is dropped."""
            digits = re.sub(r"\\D", "", text)
            if len(digits) == 11 and digits.startswith("1"):
                digits = digits[1:]
            if len(digits) != 10:
                raise ValueError(f"not a phone number: {text!r}")
            return f"({digits[:3]}) {digits[3:6]}-{digits[6:]}"
    '''),
    "tests/test_validators.py": source("""
        import pytest

        from validators import is_email, normalize_phone


        def test_valid_email():
            assert is_email("ada.lovelace+news@example.org")


        def test_email_needs_dot_in_domain():
            assert not is_email("root@localhost")


        def test_email_needs_at():
            assert not is_email("example.org")


        def test_phone_with_punctuation():
            assert normalize_phone("555.123.4567") == "(555) 123-4567"


        def test_phone_with_country_code():
            assert normalize_phone("+1 555 123 4567") == "(555) 123-4567"


        def test_phone_too_short():
            with pytest.raises(ValueError):
                normalize_phone("123")
    """),
}

TASKS = [
    SuiteTask(
        instance_id="textcase__snake-to-camel-head",
        difficulty="easy",
        problem_statement="""
            `snake_to_camel` in textcase.py capitalizes the first word

            ```python
            >>> from textcase import snake_to_camel
            >>> snake_to_camel("user_id")
            'UserId'
            ```

            Expected `'userId'` (camelCase starts lower-case). Same for one word:
            `snake_to_camel("name")` gives `'Name'` instead of `'name'`.
        """,
        files=TEXTCASE,
        bugs=(Bug("textcase.py", "return head + ", "return head.capitalize() + "),),
        fail_to_pass=(
            "tests/test_textcase.py::test_snake_to_camel",
            "tests/test_textcase.py::test_snake_to_camel_single_word",
        ),
        pass_to_pass=("tests/test_textcase.py::test_capitalize_words", "tests/test_textcase.py::test_camel_to_snake"),
    ),
    SuiteTask(
        instance_id="textcase__camel-to-snake-leading",
        difficulty="easy",
        problem_statement="""
            `camel_to_snake` in textcase.py adds a leading underscore

            ```python
            >>> from textcase import camel_to_snake
            >>> camel_to_snake("UserName")
            '_user_name'
            ```

            Expected `'user_name'`: the first character should never get an underscore in
            front of it. `camel_to_snake("userName")` works.
        """,
        files=TEXTCASE,
        bugs=(Bug("textcase.py", "char.isupper() and index > 0", "char.isupper() and index >= 0"),),
        fail_to_pass=("tests/test_textcase.py::test_camel_to_snake_leading_capital",),
        pass_to_pass=(
            "tests/test_textcase.py::test_camel_to_snake",
            "tests/test_textcase.py::test_snake_to_camel",
            "tests/test_textcase.py::test_capitalize_words",
        ),
    ),
    SuiteTask(
        instance_id="textcase__capitalize-words-slice",
        difficulty="easy",
        problem_statement="""
            `capitalize_words` in textcase.py eats the second letter of every word

            ```python
            >>> from textcase import capitalize_words
            >>> capitalize_words("hello big world")
            'Hllo Bg Wrld'
            ```

            Expected `'Hello Big World'`.
        """,
        files=TEXTCASE,
        bugs=(Bug("textcase.py", "word[:1].upper() + word[1:]", "word[:1].upper() + word[2:]"),),
        fail_to_pass=("tests/test_textcase.py::test_capitalize_words",),
        pass_to_pass=(
            "tests/test_textcase.py::test_capitalize_keeps_double_spaces",
            "tests/test_textcase.py::test_snake_to_camel",
            "tests/test_textcase.py::test_camel_to_snake",
        ),
    ),
    SuiteTask(
        instance_id="slugify__capital-letters",
        difficulty="easy",
        problem_statement="""
            `slugify` in slugify.py drops capital letters

            ```python
            >>> from slugify import slugify
            >>> slugify("Hello, World!")
            'ello-orld'
            ```

            Expected `'hello-world'`: the text should be lower-cased before the words are
            picked out.
        """,
        files=SLUGIFY,
        bugs=(Bug("slugify.py", "_WORD.findall(text.lower())", "_WORD.findall(text)"),),
        fail_to_pass=("tests/test_slugify.py::test_capitals_and_punctuation",),
        pass_to_pass=(
            "tests/test_slugify.py::test_lowercase_words",
            "tests/test_slugify.py::test_custom_separator",
            "tests/test_slugify.py::test_max_length_cuts_at_word_end",
        ),
    ),
    SuiteTask(
        instance_id="slugify__max-length-separator",
        difficulty="easy",
        problem_statement="""
            `slugify` in slugify.py leaves a trailing dash when cutting to max_length

            ```python
            >>> from slugify import slugify
            >>> slugify("hello world", max_length=6)
            'hello-'
            ```

            Expected `'hello'`: a slug cut to `max_length` should not end with the separator.
        """,
        files=SLUGIFY,
        bugs=(Bug("slugify.py", "slug[:max_length].rstrip(separator)", "slug[:max_length]"),),
        fail_to_pass=("tests/test_slugify.py::test_max_length_cuts_at_word_end",),
        pass_to_pass=(
            "tests/test_slugify.py::test_lowercase_words",
            "tests/test_slugify.py::test_capitals_and_punctuation",
            "tests/test_slugify.py::test_max_length_longer_than_slug",
        ),
    ),
    SuiteTask(
        instance_id="wrap__line-exactly-width",
        difficulty="easy",
        problem_statement="""
            `wrap` in wrap.py breaks lines that exactly fit the width

            ```python
            >>> from wrap import wrap
            >>> wrap("aaa bbb ccc", 7)
            ['aaa', 'bbb', 'ccc']
            ```

            Expected `['aaa bbb', 'ccc']`: "aaa bbb" is 7 characters, which fits a width of 7.
        """,
        files=WRAP,
        bugs=(Bug("wrap.py", "len(current) + 1 + len(word) > width", "len(current) + 1 + len(word) >= width"),),
        fail_to_pass=("tests/test_wrap.py::test_line_exactly_width",),
        pass_to_pass=(
            "tests/test_wrap.py::test_fits_on_one_line",
            "tests/test_wrap.py::test_long_word_alone",
            "tests/test_wrap.py::test_empty_text",
        ),
    ),
    SuiteTask(
        instance_id="wrap__last-line-lost",
        difficulty="medium",
        problem_statement="""
            wrap() loses the last line of text

            ```python
            >>> from wrap import wrap
            >>> wrap("one two three four five", 9)
            ['one two', 'three']
            >>> wrap("a short text", 20)
            []
            ```

            Expected `['one two', 'three', 'four five']` and `['a short text']`: the words
            collected after the last line break never make it into the result.
        """,
        files=WRAP,
        bugs=(Bug("wrap.py", "    if current:\n        lines.append(current)\n", ""),),
        fail_to_pass=("tests/test_wrap.py::test_fits_on_one_line", "tests/test_wrap.py::test_several_lines"),
        pass_to_pass=("tests/test_wrap.py::test_empty_text", "tests/test_wrap.py::test_bad_width"),
    ),
    SuiteTask(
        instance_id="wordfreq__top-words-order",
        difficulty="medium",
        problem_statement="""
            top_words returns the least frequent words

            ```python
            >>> from wordfreq import top_words
            >>> top_words("b a b c b a", 2)
            ['c', 'a']
            ```

            Expected `['b', 'a']`: "b" appears three times and should come first.
        """,
        files=WORDFREQ,
        bugs=(Bug("wordfreq.py", "key=lambda item: (-item[1], item[0])", "key=lambda item: (item[1], item[0])"),),
        fail_to_pass=("tests/test_wordfreq.py::test_top_words_by_frequency",),
        pass_to_pass=(
            "tests/test_wordfreq.py::test_counts_ignore_case_and_punctuation",
            "tests/test_wordfreq.py::test_top_words_ties_alphabetical",
            "tests/test_wordfreq.py::test_top_words_more_than_available",
        ),
    ),
    SuiteTask(
        instance_id="minitemplate__spaced-placeholder",
        difficulty="medium",
        problem_statement="""
            Placeholders with spaces inside the braces are not replaced

            ```python
            >>> from minitemplate import render
            >>> render("Hi {{ name }}!", {"name": "Ada"})
            'Hi {{ name }}!'
            ```

            Expected `'Hi Ada!'`. `render("Hi {{name}}!", {"name": "Ada"})` works. The docs
            say `{{ name }}` is the placeholder syntax.
        """,
        files=TEMPLATE,
        bugs=(Bug("minitemplate.py", 'r"\\{\\{\\s*(\\w+)\\s*\\}\\}"', 'r"\\{\\{(\\w+)\\}\\}"'),),
        fail_to_pass=("tests/test_minitemplate.py::test_render_spaced_placeholder",),
        pass_to_pass=(
            "tests/test_minitemplate.py::test_render_compact_placeholder",
            "tests/test_minitemplate.py::test_render_number",
            "tests/test_minitemplate.py::test_missing_strict",
        ),
    ),
    SuiteTask(
        instance_id="minitemplate__lenient-missing",
        difficulty="easy",
        problem_statement="""
            `render` in minitemplate.py deletes unknown placeholders when strict=False

            ```python
            >>> from minitemplate import render
            >>> render("a {{ x }} b", {}, strict=False)
            'a  b'
            ```

            Expected `'a {{ x }} b'`: in lenient mode a placeholder without a value should be
            left as it is.
        """,
        files=TEMPLATE,
        bugs=(Bug("minitemplate.py", "        return match.group(0)\n", '        return ""\n'),),
        fail_to_pass=("tests/test_minitemplate.py::test_missing_lenient_keeps_placeholder",),
        pass_to_pass=(
            "tests/test_minitemplate.py::test_render_compact_placeholder",
            "tests/test_minitemplate.py::test_render_spaced_placeholder",
            "tests/test_minitemplate.py::test_missing_strict",
        ),
    ),
    SuiteTask(
        instance_id="validators__email-domain-dot",
        difficulty="easy",
        problem_statement="""
            `is_email` in validators.py accepts addresses without a dot in the domain

            ```python
            >>> from validators import is_email
            >>> is_email("root@localhost")
            True
            ```

            Expected `False`: the domain must contain at least one dot, as the docstring says.
        """,
        files=VALIDATORS,
        bugs=(Bug("validators.py", "(\\.[\\w-]+)+$", "(\\.[\\w-]+)*$"),),
        fail_to_pass=("tests/test_validators.py::test_email_needs_dot_in_domain",),
        pass_to_pass=(
            "tests/test_validators.py::test_valid_email",
            "tests/test_validators.py::test_email_needs_at",
            "tests/test_validators.py::test_phone_with_punctuation",
        ),
    ),
    SuiteTask(
        instance_id="validators__phone-country-code",
        difficulty="easy",
        problem_statement="""
            `normalize_phone` in validators.py rejects numbers with the +1 country code

            ```python
            >>> from validators import normalize_phone
            >>> normalize_phone("+1 555 123 4567")
            ValueError: not a phone number: '+1 555 123 4567'
            ```

            Expected `'(555) 123-4567'`: an 11-digit number starting with 1 should lose the
            leading 1.
        """,
        files=VALIDATORS,
        bugs=(Bug("validators.py", 'digits.startswith("1")', 'digits.startswith("+1")'),),
        fail_to_pass=("tests/test_validators.py::test_phone_with_country_code",),
        pass_to_pass=(
            "tests/test_validators.py::test_phone_with_punctuation",
            "tests/test_validators.py::test_phone_too_short",
            "tests/test_validators.py::test_valid_email",
        ),
    ),
]
