import Foundation
import PigeonDemo

exit(await DemoCommand.main(arguments: Array(CommandLine.arguments.dropFirst())))
