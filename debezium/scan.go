package debezium

import (
	"encoding/binary"
	"math/bits"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner is a minimal, allocation-free JSON tokenizer over one record.
//
// It reads the values the decoder needs and skips everything else. Skipped
// containers are checked for balanced brackets and well-formed strings only,
// not validated in full: a decoder that must look at every byte of a 40-column
// row it does not project would lose most of its speed. Every method reports
// bad input as a *DecodeError of kind ErrMalformed; none panics.
type scanner struct {
	b []byte
	i int
}

// syntaxErr builds the error for malformed JSON at the scanner's position.
func (s *scanner) syntaxErr(what string) *DecodeError {
	return &DecodeError{Kind: ErrMalformed, Reason: "invalid JSON at byte " + strconv.Itoa(s.i) + ": " + what, Offset: -1}
}

// ws skips JSON whitespace.
func (s *scanner) ws() {
	if s.i < len(s.b) && s.b[s.i] > ' ' {
		return
	}
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\n', '\r', '\t':
			s.i++
		default:
			return
		}
	}
}

// peek skips whitespace and returns the next byte, or 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// atEnd reports whether only whitespace is left.
func (s *scanner) atEnd() bool {
	s.ws()
	return s.i >= len(s.b)
}

// enterObject consumes '{'.
func (s *scanner) enterObject() *DecodeError {
	if s.peek() != '{' {
		return s.syntaxErr("expected object")
	}
	s.i++
	return nil
}

// nextKey advances to the next member of an object entered with enterObject
// and returns its name (raw bytes, or unescaped into *buf when it has escapes),
// leaving the scanner at the member's value. first must start true for each
// object. done is true once the closing '}' has been consumed.
func (s *scanner) nextKey(first *bool, buf *[]byte) (key []byte, done bool, err *DecodeError) {
	// Fast path for compact JSON (Kafka Connect's): `"name":` first, then
	// `,"name":`, with a plain name.
	b, i := s.b, s.i
	if !*first && i < len(b) && b[i] == ',' {
		i++
	}
	if i < len(b) && b[i] == '"' && (i > s.i || *first) {
		j := i + 1
		for j < len(b) && !strStop[b[j]] {
			j++
		}
		if j+1 < len(b) && b[j] == '"' && b[j+1] == ':' {
			*first = false
			s.i = j + 2
			if s.i < len(b) && b[s.i] <= ' ' {
				s.ws()
			}
			return b[i+1 : j], false, nil
		}
	}
	c := s.peek()
	if *first {
		*first = false
		if c == '}' {
			s.i++
			return nil, true, nil
		}
	} else {
		if c == '}' {
			s.i++
			return nil, true, nil
		}
		if c != ',' {
			return nil, false, s.syntaxErr("expected ',' or '}'")
		}
		s.i++
		c = s.peek()
	}
	if c != '"' {
		return nil, false, s.syntaxErr("expected object key")
	}
	raw, esc, err := s.str()
	if err != nil {
		return nil, false, err
	}
	if esc {
		var uerr *DecodeError
		*buf, uerr = unescape((*buf)[:0], raw)
		if uerr != nil {
			return nil, false, uerr
		}
		raw = *buf
	}
	if s.peek() != ':' {
		return nil, false, s.syntaxErr("expected ':'")
	}
	s.i++
	s.ws()
	return raw, false, nil
}

// nextElem advances to the next element of an array whose '[' has been
// consumed; done is true once the closing ']' has been consumed.
func (s *scanner) nextElem(first *bool) (done bool, err *DecodeError) {
	c := s.peek()
	if c == ']' {
		s.i++
		return true, nil
	}
	if *first {
		*first = false
		return false, nil
	}
	if c != ',' {
		return false, s.syntaxErr("expected ',' or ']'")
	}
	s.i++
	s.ws()
	return false, nil
}

// members calls fn for each member of the object at the scanner's position,
// with the scanner at the member's value; fn must consume the value. It is
// for cold paths (schema parsing): the hot paths inline the loop.
func (s *scanner) members(fn func(key []byte) *DecodeError) *DecodeError {
	if err := s.enterObject(); err != nil {
		return err
	}
	var kbuf []byte
	for first := true; ; {
		k, done, err := s.nextKey(&first, &kbuf)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if err := fn(k); err != nil {
			return err
		}
	}
}

// elements calls fn for each element of the array at the scanner's
// position, with the scanner at the element; fn must consume it.
func (s *scanner) elements(fn func() *DecodeError) *DecodeError {
	if s.peek() != '[' {
		return s.syntaxErr("expected array")
	}
	s.i++
	for first := true; ; {
		done, err := s.nextElem(&first)
		if err != nil || done {
			return err
		}
		if err := fn(); err != nil {
			return err
		}
	}
}

// strStop marks the bytes that end a run of plain string characters: the
// quote, the backslash and control characters. It is never written.
var strStop = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// str reads a string token at s.i (which must be '"') and returns its raw
// contents between the quotes; esc reports whether it contains escapes.
func (s *scanner) str() (raw []byte, esc bool, err *DecodeError) {
	b := s.b
	j := s.i + 1
	for {
		j = skipPlainString(b, j)
		for j < len(b) && !strStop[b[j]] {
			j++
		}
		if j >= len(b) {
			s.i = len(b)
			return nil, false, s.syntaxErr("unterminated string")
		}
		switch c := b[j]; {
		case c == '"':
			raw = b[s.i+1 : j]
			s.i = j + 1
			return raw, esc, nil
		case c == '\\':
			esc = true
			j += 2
		default:
			s.i = j
			return nil, false, s.syntaxErr("control character in string")
		}
	}
}

// literal consumes the literal lit ("true", "false" or "null").
func (s *scanner) literal(lit string) *DecodeError {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return s.syntaxErr("invalid literal")
	}
	s.i += len(lit)
	return nil
}

// num reads a number token at s.i and returns its text; isInt reports an
// integer literal (no fraction, no exponent).
func (s *scanner) num() (raw []byte, isInt bool, err *DecodeError) {
	b := s.b
	start := s.i
	j := s.i
	if j < len(b) && b[j] == '-' {
		j++
	}
	if j >= len(b) {
		return nil, false, s.syntaxErr("invalid number")
	}
	switch c := b[j]; {
	case c == '0':
		j++
	case c >= '1' && c <= '9':
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
	default:
		return nil, false, s.syntaxErr("invalid value")
	}
	isInt = true
	if j < len(b) && b[j] == '.' {
		isInt = false
		if j = digits(b, j+1); j < 0 {
			return nil, false, s.syntaxErr("invalid number")
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		isInt = false
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		if j = digits(b, j); j < 0 {
			return nil, false, s.syntaxErr("invalid number")
		}
	}
	s.i = j
	return b[start:j], isInt, nil
}

// digits skips one or more decimal digits from j; -1 when there are none.
func digits(b []byte, j int) int {
	k := j
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	if j == k {
		return -1
	}
	return j
}

// skip skips one value of any type.
func (s *scanner) skip() *DecodeError {
	switch s.peek() {
	case '"':
		_, _, err := s.str()
		return err
	case '{', '[':
		return s.skipNested()
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	case 0:
		return s.syntaxErr("unexpected end of input")
	default:
		_, _, err := s.num()
		return err
	}
}

// structural marks the bytes skipNested must look at; it is never written.
var structural = func() (t [256]bool) {
	for _, c := range `"{}[]` {
		t[c] = true
	}
	return t
}()

// skipNested skips an object or array, checking bracket balance (bracket
// kinds are checked up to 64 levels deep) and string syntax only.
func (s *scanner) skipNested() *DecodeError {
	return s.skipOpen(0)
}

// skipOpen skips the rest of depth already-open containers (0: skip one
// whole container at s.i). Opened containers whose kind skipOpen did not see
// are not kind-checked. It tries skipWords first and, when that gives up
// (bad input, or input it does not handle), skips byte by byte
// (skipOpenBytes): both accept the same input and stop at the same byte,
// and errors come from skipOpenBytes only.
func (s *scanner) skipOpen(depth int) *DecodeError {
	if end, ok := skipWords(s.b, s.i, depth); ok {
		s.i = end
		return nil
	}
	return s.skipOpenBytes(depth)
}

// skipOpenBytes is skipOpen's reference path: one token at a time, with
// the errors.
func (s *scanner) skipOpenBytes(depth int) *DecodeError {
	b := s.b
	k := nesting{depth: depth, base: depth}
	j := s.i
	for {
		j = skipNonStructural(b, j)
		for j < len(b) && !structural[b[j]] {
			j++
		}
		if j >= len(b) {
			s.i = len(b)
			return s.syntaxErr("unexpected end of input")
		}
		switch c := b[j]; c {
		case '"':
			s.i = j
			if _, _, err := s.str(); err != nil {
				return err
			}
			j = s.i
			continue
		default: // a bracket
			done, ok := k.bracket(c)
			if !ok {
				s.i = j
				return s.syntaxErr("mismatched bracket")
			}
			if done {
				s.i = j + 1
				return nil
			}
		}
		j++
	}
}

// nesting is the open containers of a skip: how many, and the kinds of
// the first 64 levels opened since it began (at depth base).
type nesting struct {
	depth, base int
	stack       uint64 // bit d set: level base+d is an object
}

// bracket applies the bracket c, found outside strings; ok is false when
// it closes a container of the other kind, done when it closes the last
// one.
func (k *nesting) bracket(c byte) (done, ok bool) {
	if c == '{' || c == '[' {
		if d := k.depth - k.base; d < 64 {
			if c == '{' {
				k.stack |= 1 << d
			} else {
				k.stack &^= 1 << d
			}
		}
		k.depth++
		return false, true
	}
	k.depth--
	if d := k.depth - k.base; d >= 0 && d < 64 && (k.stack>>d&1 == 1) != (c == '}') {
		return false, false
	}
	return k.depth == 0, true
}

// unescape appends the unescaped form of a JSON string body to dst.
// Invalid or unpaired surrogates become U+FFFD.
func unescape(dst, raw []byte) ([]byte, *DecodeError) {
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			dst = append(dst, c)
			continue
		}
		i++
		if i >= len(raw) {
			return dst, &DecodeError{Kind: ErrMalformed, Reason: "invalid JSON: truncated escape", Offset: -1}
		}
		switch raw[i] {
		case '"', '\\', '/':
			dst = append(dst, raw[i])
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(raw[i+1:])
			if !ok {
				return dst, &DecodeError{Kind: ErrMalformed, Reason: "invalid JSON: bad \\u escape", Offset: -1}
			}
			i += 4
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if i+2 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
					if v, ok := hex4(raw[i+3:]); ok {
						r2 = v
					}
				}
				if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
					r = dec
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
		default:
			return dst, &DecodeError{Kind: ErrMalformed, Reason: "invalid JSON: bad escape", Offset: -1}
		}
	}
	return dst, nil
}

// hex4 parses four hex digits.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// parseIntLit parses an integer literal (as returned by num with isInt)
// without allocating; ok is false on overflow.
func parseIntLit(b []byte) (int64, bool) {
	neg := false
	if len(b) > 0 && b[0] == '-' {
		neg = true
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
	}
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return int64(-u), true
	}
	if u > 1<<63-1 {
		return 0, false
	}
	return int64(u), true
}

// SWAR (SIMD within a register) helpers: test eight bytes at a time.
const (
	swarLo = 0x0101010101010101
	swarHi = 0x8080808080808080
	swar7f = 0x7f7f7f7f7f7f7f7f
)

// swarZero has the high bit set in (at least) the lowest zero byte of x;
// bits above the lowest match may be spurious, so only the lowest is used.
func swarZero(x uint64) uint64 { return (x - swarLo) & ^x & swarHi }

// swarLess20 marks bytes below 0x20 (lowest match exact).
func swarLess20(x uint64) uint64 { return (x - swarLo*0x20) & ^x & swarHi }

// skipPlainString advances j over string bytes that are not '"', '\\' or
// control characters, eight at a time; the caller finishes byte by byte.
func skipPlainString(b []byte, j int) int {
	for j+8 <= len(b) {
		x := binary.LittleEndian.Uint64(b[j:])
		m := swarZero(x^(swarLo*'"')) | swarZero(x^(swarLo*'\\')) | swarLess20(x)
		if m != 0 {
			return j + bits.TrailingZeros64(m)/8
		}
		j += 8
	}
	return j
}

// skipNonStructural advances j over bytes that are none of '"', '{', '}',
// '[', ']', eight at a time ('[' | 0x20 == '{', ']' | 0x20 == '}').
func skipNonStructural(b []byte, j int) int {
	for j+8 <= len(b) {
		x := binary.LittleEndian.Uint64(b[j:])
		y := x | swarLo*0x20
		m := swarZero(x^(swarLo*'"')) | swarZero(y^(swarLo*'{')) | swarZero(y^(swarLo*'}'))
		if m != 0 {
			return j + bits.TrailingZeros64(m)/8
		}
		j += 8
	}
	return j
}

// skipWords is skipOpen for well-formed input, eight bytes at a time: each
// word's quotes, backslashes, control characters and brackets become byte
// masks, a prefix XOR of the quote mask tells which bytes are inside a
// string, and only brackets outside strings are looked at one by one. A
// word with a backslash is stepped byte by byte up to the escaped byte.
// It returns the position after the container that closes depth (as
// skipOpenBytes does), or ok false for anything skipOpenBytes would reject
// (an unterminated string, a control character in a string, a mismatched
// bracket, the end of b) without saying why.
func skipWords(b []byte, j, depth int) (end int, ok bool) {
	n := nesting{depth: depth, base: depth}
	var inStr uint64 // swarHi inside a string, else 0
	for {
		stop := len(b) // the byte loop's end: the tail, or past an escape
		if j+8 <= len(b) {
			x := binary.LittleEndian.Uint64(b[j:])
			if bs := swarEq(x, '\\'); bs != 0 {
				stop = min(j+bits.TrailingZeros64(bs)/8+2, len(b))
			} else {
				q := swarEq(x, '"')
				in := q ^ q<<8 // bytes inside a string (an opening quote counts as inside)
				in ^= in << 16
				in ^= in << 32
				in ^= inStr
				if swarCtl(x)&in != 0 {
					return 0, false
				}
				y := x | swarLo*0x20 // '[' → '{', ']' → '}'
				for br := (swarEq(y, '{') | swarEq(y, '}')) &^ in; br != 0; br &= br - 1 {
					k := j + bits.TrailingZeros64(br)/8
					done, ok := n.bracket(b[k])
					if !ok {
						return 0, false
					}
					if done {
						return k + 1, true
					}
				}
				inStr = uint64(int64(in)>>63) & swarHi
				j += 8
				continue
			}
		}
		// Byte by byte up to stop; the lowest backslash's escape ends
		// before stop, so no escape is pending after the loop.
		esc := false
		for ; j < stop; j++ {
			c := b[j]
			switch {
			case inStr != 0:
				switch {
				case esc:
					esc = false
				case c == '\\':
					esc = true
				case c == '"':
					inStr = 0
				case c < 0x20:
					return 0, false
				}
			case c == '"':
				inStr = swarHi
			case c == '{' || c == '[' || c == '}' || c == ']':
				done, ok := n.bracket(c)
				if !ok {
					return 0, false
				}
				if done {
					return j + 1, true
				}
			}
		}
		if j >= len(b) {
			return 0, false
		}
	}
}

// swarEq marks (high bit) exactly the bytes of x equal to c.
func swarEq(x uint64, c byte) uint64 {
	y := x ^ swarLo*uint64(c)
	return ^((y&swar7f + swar7f) | y | swar7f)
}

// swarCtl marks (high bit) exactly the bytes of x below 0x20.
func swarCtl(x uint64) uint64 {
	return ^((x&swar7f + swarLo*0x60) | x) & swarHi
}

// Members calls fn for each member of the JSON object in b with the member's
// name (unescaped; valid only during the call) and the raw bytes of its value
// (a subslice of b). Values are checked as the scanner's skip checks them:
// strings, numbers and literals in full, containers for balance and string
// syntax. Anything after the object other than whitespace is an error. It
// does not allocate unless a name has escapes. Errors are *DecodeError (of
// kind ErrMalformed) or fn's.
func Members(b []byte, fn func(name, raw []byte) error) error {
	s := scanner{b: b}
	if err := s.enterObject(); err != nil {
		return err
	}
	var kbuf []byte
	for first := true; ; {
		name, done, err := s.nextKey(&first, &kbuf)
		if err != nil {
			return err
		}
		if done {
			break
		}
		s.ws()
		start := s.i
		if err := s.skip(); err != nil {
			return err
		}
		if err := fn(name, b[start:s.i]); err != nil {
			return err
		}
	}
	if !s.atEnd() {
		return s.syntaxErr("data after the object")
	}
	return nil
}

// ParseInt parses a JSON integer literal without allocating; ok is false
// if raw is not one or overflows int64.
func ParseInt(raw []byte) (int64, bool) { return parseIntLit(raw) }

// PlainString returns the contents of the JSON string literal raw when it
// has no escapes; ok is false otherwise (not a string, or escaped).
func PlainString(raw []byte) ([]byte, bool) {
	if len(raw) == 0 || raw[0] != '"' {
		return nil, false
	}
	s := scanner{b: raw}
	in, esc, err := s.str()
	if err != nil || esc || s.i != len(raw) {
		return nil, false
	}
	return in, true
}
