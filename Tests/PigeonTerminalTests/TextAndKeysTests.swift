import PigeonTerminal
import Testing

@Suite struct TextWidthTests {
    @Test func cellsOfLatinCJKEmojiAndCombiningMarks() {
        #expect(TextWidth.of("abc") == 3)
        #expect(TextWidth.of("你好") == 4)
        #expect(TextWidth.of("⏰") == 2)
        #expect(TextWidth.of("⚠️") == 2)
        #expect(TextWidth.of("✓✓") == 2)
        #expect(TextWidth.of("e\u{301}") == 1)
    }

    @Test func controlCharactersNeverReachTheTerminal() {
        let hostile = "hi\u{1B}[2J\u{1B}]0;owned\u{07}\r\tthere\u{9B}"
        let clean = TextWidth.sanitized(hostile)
        #expect(!clean.unicodeScalars.contains { $0.value < 0x20 || (0x7F..<0xA0).contains($0.value) })
        #expect(clean.hasPrefix("hi\u{FFFD}[2J"))
        #expect(TextWidth.sanitized("a\nb") == "a b")
        #expect(TextWidth.sanitized("a\nb", keepNewlines: true) == "a\nb")
    }

    @Test func wrapsAtSpacesBreaksLongWordsAndCountsWideCharacters() {
        #expect(TextWidth.wrapped("the quick brown fox", width: 10) == ["the quick", "brown fox"])
        #expect(TextWidth.wrapped("abcdefghij", width: 4) == ["abcd", "efgh", "ij"])
        #expect(TextWidth.wrapped("你好世界", width: 5) == ["你好", "世界"])
        #expect(TextWidth.wrapped("one\ntwo", width: 10) == ["one", "two"])
        #expect(TextWidth.wrapped("", width: 10) == [""])
        for line in TextWidth.wrapped("消息 never lost 永不丢失 ✓✓ ⏰⏰⏰ supercalifragilistic", width: 7) {
            #expect(TextWidth.of(line) <= 7, "\(line)")
        }
    }

    @Test func truncatesWithAnEllipsisAndPads() {
        #expect(TextWidth.truncated("hello world", to: 6) == "hello…")
        #expect(TextWidth.truncated("hello", to: 5) == "hello")
        #expect(TextWidth.truncated("你好世界", to: 5) == "你好…")
        #expect(TextWidth.padded("ab", to: 4) == "ab  ")
        #expect(TextWidth.of(TextWidth.padded("你好世界", to: 5)) == 5)
    }
}

@Suite struct KeyParserTests {
    @Test func decodesTextControlKeysAndEscapeSequences() {
        var parser = KeyParser()
        #expect(parser.feed(Array("hi".utf8)) == [.text("hi")])
        #expect(parser.feed([0x0D]) == [.enter])
        #expect(parser.feed([0x7F]) == [.backspace])
        #expect(parser.feed([0x03, 0x12, 0x06]) == [.control("c"), .control("r"), .control("f")])
        #expect(parser.feed(Array("\u{1B}[A\u{1B}[B\u{1B}[C\u{1B}[D".utf8)) == [.up, .down, .right, .left])
        #expect(parser.feed(Array("\u{1B}[5~\u{1B}[6~\u{1B}[3~\u{1B}[H\u{1B}[F\u{1B}OA".utf8)) == [.pageUp, .pageDown, .delete, .home, .end, .up])
        #expect(parser.feed([0x1B]) == [.escape])
        #expect(parser.feed(Array("a\u{1B}[1;5Cb".utf8)) == [.text("a"), .right, .text("b")])
    }

    @Test func putsBackCharactersAndSequencesSplitAcrossReads() {
        var parser = KeyParser()
        let bytes = Array("你".utf8)
        #expect(parser.feed([bytes[0]]) == [])
        #expect(parser.feed(Array(bytes[1...]) + Array("!".utf8)) == [.text("你!")])
        #expect(parser.feed([0x1B, UInt8(ascii: "["), UInt8(ascii: "5")]) == [])
        #expect(parser.feed([UInt8(ascii: "~")]) == [.pageUp])
    }
}

@Suite struct LineEditorTests {
    @Test func editsAtTheCursor() {
        var editor = LineEditor()
        editor.insert("helo")
        editor.moveLeft()
        editor.insert("l")
        #expect(editor.text == "hello")
        editor.moveToStart()
        editor.deleteForward()
        #expect(editor.text == "ello")
        editor.moveToEnd()
        editor.backspace()
        #expect(editor.text == "ell")
        editor.insert(" world")
        editor.deleteWordBackward()
        #expect(editor.text == "ell ")
        #expect(editor.take() == "ell ")
        #expect(editor.isEmpty)
    }

    @Test func pastedControlCharactersAreNeutralised() {
        var editor = LineEditor()
        editor.insert("a\u{1B}[31mb")
        #expect(!editor.text.contains("\u{1B}"))
    }

    @Test func theVisiblePartFollowsTheCursor() {
        let editor = LineEditor("0123456789abcdef")
        let (text, column) = editor.visible(width: 8)
        #expect(text == "9abcdef")
        #expect(column == 7)
        var start = editor
        start.moveToStart()
        #expect(start.visible(width: 8) == ("01234567", 0))
    }
}
