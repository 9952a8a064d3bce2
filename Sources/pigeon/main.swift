import Foundation
import PigeonTerminal

exit(await PigeonCommand.main(arguments: Array(CommandLine.arguments.dropFirst())))
