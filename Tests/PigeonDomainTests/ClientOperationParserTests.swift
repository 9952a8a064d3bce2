import Foundation
import PigeonProtocol
import PigeonTestSupport
import Testing

@testable import PigeonServer

/// The fast path must agree with `JSONDecoder` on every input it accepts, and leave the rest to it.
@Suite struct ClientOperationParserTests {
    static let inputs: [String] = [
        #"{"op":"send","conversationId":"c","clientMessageId":"m","type":"text","body":"hi","clientTimestamp":1763700000000}"#,
        #" { "op" : "send" , "conversationId":"c","clientMessageId":"m","type":"text","body":"héllo 🕊️","clientTimestamp":-5 } "#,
        #"{"op":"send","conversationId":"c","clientMessageId":"m","type":"text","body":"with \"quote\"","clientTimestamp":1}"#,
        #"{"op":"send","conversationId":"c","clientMessageId":"m","type":"text","body":"x","clientTimestamp":1.5}"#,
        #"{"op":"send","conversationId":"c","clientMessageId":"m","type":"text","body":"x","clientTimestamp":1e3}"#,
        #"{"op":"send","conversationId":"c","clientMessageId":"m","type":"text","body":"x","clientTimestamp":"1"}"#,
        #"{"op":"send","conversationId":"c","clientMessageId":"m","type":"text","body":"x"}"#,
        #"{"op":"send","conversationId":"c","clientMessageId":"m","type":"text","body":"x","clientTimestamp":1,"extra":{"a":[1,2]}}"#,
        #"{"op":"send","conversationId":"c","clientMessageId":"m","type":"text","body":"x","clientTimestamp":1,"extra":true}"#,
        #"{"op":"send","conversationId":"c","clientMessageId":"m","type":"text","body":"x","clientTimestamp":99999999999999999999}"#,
        #"{"op":"receipt","conversationId":"c","kind":"read","upToSeq":42}"#,
        #"{"op":"receipt","conversationId":"c","kind":"seen","upToSeq":42}"#,
        #"{"op":"typing","conversationId":"c","active":true}"#,
        #"{"op":"typing","conversationId":"c","active":fals}"#,
        #"{"op":"dance","conversationId":"c"}"#,
        #"{"op":"send","op":"typing","conversationId":"c","active":false}"#,
        #"{"op":"send","conversationId":null}"#,
        #"{}"#, #"[]"#, #"{"op":"send""#, "", "nope", #"{"op":"typing","conversationId":"c","active":true} trailing"#,
    ]

    @Test(arguments: inputs)
    func agreesWithTheDecoder(_ text: String) {
        let decoded = try? JSONDecoder().decode(ClientOperation.self, from: Data(text.utf8))
        if let fast = ClientOperationParser.fastPath(text) {
            #expect(fast == decoded, "fast path accepted \(text) differently")
        }
        #expect((try? ClientOperationParser.parse(text)) == decoded)
    }

    static let sendBodies: [String] = [
        #"{"clientMessageId":"m","type":"text","body":"hi","clientTimestamp":1763700000000}"#,
        #" { "clientMessageId" : "m" , "type":"text","body":"héllo 🕊️","clientTimestamp":-5 } "#,
        #"{"clientMessageId":"m","type":"text","body":"with \"quote\" and \u00e9","clientTimestamp":1}"#,
        #"{"clientMessageId":"m","type":"text","body":"x","clientTimestamp":1.5}"#,
        #"{"clientMessageId":"m","type":"text","body":"x","clientTimestamp":"1"}"#,
        #"{"clientMessageId":"m","type":"text","body":"x"}"#,
        #"{"clientMessageId":"m","type":"text","body":"x","clientTimestamp":1,"extra":true}"#,
        #"{"clientMessageId":"m","type":"text","body":"x","clientTimestamp":1,"extra":{"a":[1,2]}}"#,
        #"{"clientMessageId":"m","clientMessageId":"n","type":"text","body":"x","clientTimestamp":1}"#,
        #"{"clientMessageId":"m","type":"text","body":null,"clientTimestamp":1}"#,
        #"{"clientMessageId":"m","type":"text","body":"x","clientTimestamp":99999999999999999999}"#,
        #"[]"#, "", #"{"clientMessageId":"m""#, #"{"clientMessageId":"m","type":"text","body":"x","clientTimestamp":1} x"#,
    ]

    /// The HTTP send body's fast path agrees with the decoder, and a body it does not take gets the decoder's answer
    /// (a key given twice included: refused, not silently resolved).
    @Test(arguments: sendBodies)
    func sendBodyAgreesWithTheDecoder(_ text: String) {
        let decoded = try? JSONBody.decode(SendMessageRequest.self, from: Data(text.utf8))
        if let fast = ClientOperationParser.fastSendPath(text) {
            #expect(fast == decoded, "fast path accepted \(text) differently")
        }
        #expect((try? ClientOperationParser.parseSend(text)) == decoded)
    }

    @Test func theCommonSendBodyTakesTheFastPath() {
        #expect(ClientOperationParser.fastSendPath(Self.sendBodies[0]) != nil)
        #expect(ClientOperationParser.fastSendPath(Self.sendBodies[1]) != nil)
        #expect(ClientOperationParser.fastSendPath(Self.sendBodies[2]) == nil, "escapes go to the decoder")
    }

    @Test func theCommonShapeTakesTheFastPath() {
        #expect(ClientOperationParser.fastPath(Self.inputs[0]) != nil)
        #expect(ClientOperationParser.fastPath(Self.inputs[10]) != nil)
        #expect(ClientOperationParser.fastPath(Self.inputs[12]) != nil)
    }
}
